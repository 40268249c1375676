import { setTimeout as sleep } from 'node:timers/promises';
import { vpcOutbox, vpcTable } from '@outbox/migrations';
import { enqueue, type IntentPayload, type AnyKysely } from '@outbox/outbox';
import { registrationTuples } from '@outbox/service-kit';
import type { Random } from './seeded-random.js';

/** What `createWorkload` takes. */
export interface WorkloadConfig {
  readonly db: AnyKysely;
  readonly partitions: number;
  /** Episodes in flight at once. */
  readonly concurrency: number;
  readonly random: Random;
  /** Share of steps that enqueue a permanently bad intent instead. Default 0.01. */
  readonly badShare?: number;
}

/** Counts of what the workload committed. */
export interface WorkloadFigures {
  readonly registers: number;
  readonly deregisters: number;
  readonly bad: number;
  /** Partitions the workload touched (bad ones apart). */
  readonly partitions: number;
  /** Partitions a late-write provocation took out of the episodes. */
  readonly resting: number;
  readonly badPartitions: number;
  /** Transactions that failed (nothing of them was written): should stay 0. */
  readonly failedTransactions: number;
}

/** A register/deregister/re-register workload over the partitions of the vpc outbox. */
export interface Workload {
  /** Runs episodes until `until` (a `Date.now()` time) or the signal; resolves when the last one ended. */
  run(until: number, signal: AbortSignal): Promise<void>;
  /**
   * Makes the owner contradict a held intent on `object`, behind the partition's other steps: after
   * a held register the resource is deleted (unless it is already), after a held deregister it is
   * created again (unless it is there), so the held Write, landing late, leaves drift. Takes the
   * partition out of the episodes, so that drift stays for the checks instead of being healed by
   * chance by a later step.
   */
  contradict(object: string, held: 'register' | 'deregister'): Promise<void>;
  /** Ids of every intent committed, and of the bad ones among them. */
  readonly enqueued: ReadonlySet<string>;
  readonly badIds: ReadonlySet<string>;
  figures(): WorkloadFigures;
}

/** Partitions of the workload are `vpc:chaos-<n>`; bad intents go to `vpc:chaos-bad-<n>`, which no row ever backs. */
export const BAD_PARTITION_PREFIX = 'vpc:chaos-bad-';
const PROJECTS = 10;

interface PartitionState {
  readonly index: number;
  present: boolean;
  /** Bumped at every register: a re-registration names a new owner, so a stale register shows. */
  generation: number;
  busy: boolean;
  /** Flipped by a provocation: no episode touches it again. */
  resting: boolean;
  /** The partition's steps run one after another, whoever asks (an episode, a contradiction). */
  chain: Promise<void>;
}

/**
 * The same writes as a register service's create and delete (docs/design.md §8): the resource row
 * in `vpc.vpcs` and its intent in `vpc.fga_register_outbox`, in one transaction. An episode takes an
 * idle partition and flips it one to three times, 30–600 ms apart, so deregisters follow registers
 * closely; ~1 % of steps enqueue a relation the model lacks on a partition of their own (poisoned
 * at once, never delivered).
 *
 * @example
 * const workload = createWorkload({ db, partitions: 400, concurrency: 12, random });
 * await workload.run(Date.now() + 60_000, signal);
 */
export function createWorkload(config: WorkloadConfig): Workload {
  const { db, random } = config;
  const badShare = config.badShare ?? 0.01;
  const states: PartitionState[] = Array.from({ length: config.partitions }, (_, index) => ({
    index,
    present: false,
    generation: 0,
    busy: false,
    resting: false,
    chain: Promise.resolve(),
  }));
  const enqueued = new Set<string>();
  const badIds = new Set<string>();
  const touched = new Set<number>();
  const counts = { registers: 0, deregisters: 0, bad: 0, failedTransactions: 0 };
  let failuresShown = 0;

  const failed = (error: unknown) => {
    counts.failedTransactions += 1;
    if (failuresShown++ < 3)
      console.error(`[chaos] a workload transaction failed: ${error instanceof Error ? error.message : String(error)}`);
  };

  const step = async (state: PartitionState): Promise<void> => {
    const id = `chaos-${state.index}`;
    const object = `vpc:${id}`;
    try {
      if (!state.present) {
        const generation = state.generation + 1;
        const projectId = `p${state.index % PROJECTS}`;
        const payload: IntentPayload = {
          writes: registrationTuples(object, projectId, `u${state.index}-g${generation}`),
        };
        const intentId = await db.transaction().execute(async (trx) => {
          await trx
            .insertInto(vpcTable.qualifiedName)
            .values({
              id,
              project_id: projectId,
              name: id,
              created_by: `u${state.index}-g${generation}`,
              cidr_block: '10.0.0.0/16',
            })
            .execute();
          return enqueue(trx, vpcOutbox, { partitionKey: object, payload });
        });
        enqueued.add(intentId);
        state.present = true;
        state.generation = generation;
        counts.registers += 1;
      } else {
        const intentId = await db.transaction().execute(async (trx) => {
          const row = await trx
            .deleteFrom(vpcTable.qualifiedName)
            .where('id', '=', id)
            .returning(['project_id', 'created_by'])
            .executeTakeFirstOrThrow();
          return enqueue(trx, vpcOutbox, {
            partitionKey: object,
            payload: { deletes: registrationTuples(object, row.project_id, row.created_by) },
          });
        });
        enqueued.add(intentId);
        state.present = false;
        counts.deregisters += 1;
      }
      touched.add(state.index);
    } catch (error) {
      failed(error);
    }
  };

  const queued = (state: PartitionState): Promise<void> => {
    const next = state.chain.then(() => step(state));
    state.chain = next;
    return next;
  };

  const enqueueBad = async () => {
    const object = `${BAD_PARTITION_PREFIX}${counts.bad}`;
    counts.bad += 1;
    try {
      const intentId = await db.transaction().execute((trx) =>
        enqueue(trx, vpcOutbox, {
          partitionKey: object,
          payload: { writes: [{ user: 'user:mallory', relation: 'no_such_relation', object }] },
        }),
      );
      enqueued.add(intentId);
      badIds.add(intentId);
    } catch (error) {
      failed(error);
    }
  };

  const idlePartition = (): PartitionState | undefined => {
    for (let tries = 0; tries < 20; tries += 1) {
      const state = random.pick(states);
      if (!state.busy && !state.resting) return state;
    }
    return undefined;
  };

  const episodes = async (until: number, signal: AbortSignal) => {
    while (Date.now() < until && !signal.aborted) {
      const state = idlePartition();
      if (!state) {
        await sleep(20, undefined, { signal }).catch(() => undefined);
        continue;
      }
      state.busy = true;
      try {
        const steps = random.int(1, 3);
        for (let i = 0; i < steps && !signal.aborted && !state.resting; i += 1) {
          if (random.chance(badShare)) await enqueueBad();
          else await queued(state);
          await sleep(random.int(30, 600), undefined, { signal }).catch(() => undefined);
        }
      } finally {
        state.busy = false;
      }
    }
  };

  return {
    run: async (until, signal) => {
      await Promise.all(Array.from({ length: config.concurrency }, () => episodes(until, signal)));
    },
    contradict: async (object, held) => {
      const match = /^vpc:chaos-(\d+)$/.exec(object);
      const state = match ? states[Number(match[1])] : undefined;
      if (!state) return;
      state.resting = true;
      const next = state.chain.then(() => (state.present === (held === 'register') ? step(state) : undefined));
      state.chain = next;
      await next;
    },
    enqueued,
    badIds,
    figures: () => ({
      ...counts,
      partitions: touched.size,
      resting: states.filter((s) => s.resting).length,
      badPartitions: counts.bad,
    }),
  };
}
