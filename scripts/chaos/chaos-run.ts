import { setTimeout as sleep } from 'node:timers/promises';
import { OpenFgaClient } from '@openfga/sdk';
import { migrateToLatest, vpcOutbox, writeAuthorizationModel } from '@outbox/migrations';
import { outboxStats, type AnyKysely } from '@outbox/outbox';
import { createReconciler } from '@outbox/reconciler';
import { createServicePool } from '@outbox/service-kit';
import { createDatabase, startStack, withDatabase, type Stack } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import type pg from 'pg';
import type { ChaosOptions } from './chaos-options.js';
import { startDrainerFleet, type DrainerFleet, type FleetFigures } from './drainer-fleet.js';
import { checkDrift, type DriftedObject, type DriftReport } from './drift.js';
import { runFaults, type FaultFigures } from './fault-schedule.js';
import { intentOutcomes, type IntentOutcomes } from './lost-intents.js';
import { takeOverOpenFga, type RestartableOpenFga } from './openfga-restarts.js';
import { findOrderViolations } from './order-violations.js';
import { seededRandom } from './seeded-random.js';
import { BAD_PARTITION_PREFIX, createWorkload, type WorkloadFigures } from './workload.js';

/** The run could not be set up or carried out (not a failed check: those are in the result). */
export class ChaosRunError extends Error {
  override readonly name = 'ChaosRunError';
}

/** A drifted object with its ledger, to read what happened to it. */
export interface DriftSample extends DriftedObject {
  /** The partition's outbox rows in id order: `#id register|deregister sent HH:MM:SS.mmm` (or `pending`). */
  readonly ledger: readonly string[];
}

/** Everything a run measured. */
export interface ChaosResult {
  readonly seed: number;
  readonly short: boolean;
  readonly seconds: {
    readonly faults: number;
    readonly drain: number;
    readonly settle: number;
    readonly total: number;
  };
  readonly workload: WorkloadFigures & { readonly intents: number };
  readonly faults: Omit<FaultFigures, 'lateWriteAttempts'> & {
    readonly lateWriteAttempts: number;
    /** Held Writes OpenFGA accepted after their drainer had lost its claim. */
    readonly lateWrites: number;
    /** Objects those Writes named, and how many of them another drainer delivered during the hold. */
    readonly lateWriteObjects: number;
    readonly lateWriteObjectsOvertaken: number;
    readonly lateWriteOutcomes: Readonly<Record<string, number>>;
  };
  readonly drainers: FleetFigures;
  readonly redrive: { readonly passes: number; readonly revived: number; readonly superseded: number };
  readonly checks: {
    readonly intents: IntentOutcomes;
    readonly order: {
      readonly sentAtBackwards: readonly string[];
      readonly deliveredPastDeliverable: readonly string[];
      readonly samples: number;
    };
    readonly drift: Omit<DriftReport, 'drifted'> & {
      readonly objectsDrifted: number;
      /** Drifted objects no late write named: drift the provocation does not explain (a new bug). */
      readonly objectsDriftedUnexplained: readonly string[];
      readonly samples: readonly DriftSample[];
    };
  };
  /** lost = 0, order violations = 0, drift = 0 and overlapping requests = 0. */
  readonly passed: boolean;
}

const DRAIN_TIMEOUT_MS = 120_000;
const REDRIVE_PASSES = 5;
const DRIFT_SAMPLES = 5;
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Polls until nothing is deliverable; returns the seconds it took (or the timeout's). */
async function drained(db: AnyKysely, signal: AbortSignal): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < DRAIN_TIMEOUT_MS) {
    if ((await outboxStats(db, vpcOutbox)).deliverable === 0) break;
    await sleep(250, undefined, { signal });
  }
  return (Date.now() - started) / 1000;
}

async function ledgerOf(db: AnyKysely, object: string): Promise<string[]> {
  const { rows } = await sql<{ id: string; kind: string; sent: string | null; attempts: number }>`
    select id::text, case when payload ? 'writes' then 'register' else 'deregister' end as kind,
           to_char(sent_at, 'HH24:MI:SS.MS') as sent, attempt_count as attempts
    from ${sql.table(vpcOutbox.table)} as t where resource_id = ${object} order by t.id`.execute(db);
  return rows.map((r) => `#${r.id} ${r.kind} ${r.sent ? `sent ${r.sent}` : `pending (${r.attempts} attempts)`}`);
}

/**
 * One chaos run (see docs/RELIABILITY.md): starts a Postgres and an OpenFGA of its own, runs the
 * workload under faults, drains, redrives, settles, checks; stops everything it started, whatever
 * happens. An aborted `signal` ends it early (the sleeps reject with an AbortError).
 *
 * @example
 * const result = await runChaos(options, AbortSignal.timeout(600_000), (line) => console.error(line));
 * process.exitCode = result.passed ? 0 : 1;
 */
export async function runChaos(
  options: ChaosOptions,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<ChaosResult> {
  if (process.env.DATABASE_URL || process.env.OPENFGA_API_URL) {
    throw new ChaosRunError(
      'chaos starts its own Postgres and OpenFGA (it restarts OpenFGA and terminates backends): unset DATABASE_URL and OPENFGA_API_URL',
    );
  }
  const random = seededRandom(options.seed);
  const startedAt = Date.now();
  let stack: Stack | undefined;
  let openfga: RestartableOpenFga | undefined;
  let fleet: DrainerFleet | undefined;
  const pools: pg.Pool[] = [];
  let db: AnyKysely | undefined;
  try {
    log('starting Postgres and OpenFGA (postgres datastore)');
    stack = await startStack({ mode: 'native', openfgaDatastore: 'postgres' });
    // The stack keeps OpenFGA's datastore in a database named `openfga`; a restart must reuse it.
    const datastoreUri = withDatabase(stack.postgresUrl, 'openfga');
    const databaseUrl = await createDatabase(stack.postgresUrl, 'chaos');
    const pool = (name: string, max: number) => {
      const url = new URL(databaseUrl);
      url.searchParams.set('application_name', name);
      // The services' pool: a connection lost mid-query (a Ctrl-C stops Postgres too) fails the query, not the run.
      const p = createServicePool(url.toString(), max, quiet);
      pools.push(p);
      return p;
    };
    db = new Kysely({ dialect: new PostgresDialect({ pool: pool('chaos-workload', options.concurrency + 4) }) });
    await migrateToLatest(db);
    openfga = takeOverOpenFga(stack, datastoreUri);
    const { id: storeId } = await new OpenFgaClient({ apiUrl: openfga.apiUrl }).createStore({ name: 'chaos' });
    const authorizationModelId = await writeAuthorizationModel(new OpenFgaClient({ apiUrl: openfga.apiUrl, storeId }));

    log(`starting ${options.drainers} drainer processes, each behind its own delaying proxy`);
    fleet = await startDrainerFleet({
      count: options.drainers,
      databaseUrl,
      upstream: openfga.upstream,
      storeId,
      authorizationModelId,
      admin: pool('chaos-admin', 2),
      restartDelayMs: () => random.int(200, 1_500),
    });

    const workloadDb = db;
    const workload = createWorkload({ db, partitions: options.partitions, concurrency: options.concurrency, random });
    const faultsStarted = Date.now();
    const until = faultsStarted + options.durationS * 1000;
    log(`${options.durationS} s of workload and faults (${options.faults.join(', ')}), seed ${options.seed}`);
    const sentAtBackwards = new Set<string>();
    const deliveredPastDeliverable = new Set<string>();
    let samples = 0;
    const sample = async () => {
      const found = await findOrderViolations(workloadDb);
      found.sentAtBackwards.forEach((k) => sentAtBackwards.add(k));
      found.deliveredPastDeliverable.forEach((k) => deliveredPastDeliverable.add(k));
      samples += 1;
    };
    const sampler = (async () => {
      while (Date.now() < until && !signal.aborted) {
        await sample();
        await sleep(1_000, undefined, { signal }).catch(() => undefined);
      }
    })();
    const progress = setInterval(() => {
      const w = workload.figures();
      log(
        `${Math.round((Date.now() - faultsStarted) / 1000)} s: ${w.registers + w.deregisters + w.bad} intents committed`,
      );
    }, 10_000);
    let faultFigures: FaultFigures;
    try {
      [faultFigures] = await Promise.all([
        runFaults(
          {
            fleet,
            openfga,
            workload,
            random,
            faults: options.faults,
            holdMs: options.holdMs,
            faultEveryMs: options.faultEveryMs,
            signal,
            log,
          },
          until,
        ),
        workload.run(until, signal),
        sampler,
      ]);
    } finally {
      clearInterval(progress);
    }
    signal.throwIfAborted(); // the loops end quietly on an abort; the run must not go on to its checks
    const faultsSeconds = (Date.now() - faultsStarted) / 1000;

    log('faults stopped; draining');
    fleet.calm();
    await fleet.allRunning();
    let drainSeconds = await drained(db, signal);
    const reconciler = createReconciler({ db, spec: vpcOutbox, logger: quiet });
    const redrive = { passes: 0, revived: 0, superseded: 0 };
    for (let pass = 0; pass < REDRIVE_PASSES; pass += 1) {
      const result = await reconciler.redrivePoisoned();
      redrive.passes += 1;
      redrive.revived += result.revived.length;
      redrive.superseded = result.superseded.length;
      const good = result.revived.filter((r) => !r.partitionKey.startsWith(BAD_PARTITION_PREFIX));
      if (result.revived.length > 0) drainSeconds += await drained(db, signal);
      // Bad intents come back at every pass (nothing supersedes them) and are poisoned again at once.
      if (good.length === 0 && result.deferred.length === 0 && !result.more) break;
    }
    log(`drained in ${drainSeconds.toFixed(1)} s; settling for ${options.settleS} s`);
    await sleep(options.settleS * 1000, undefined, { signal });
    await sample();
    await fleet.stop();

    log('checking');
    const intents = await intentOutcomes(db, workload.enqueued, workload.badIds);
    const drift = await checkDrift(db, new OpenFgaClient({ apiUrl: openfga.apiUrl, storeId }));
    const driftSamples: DriftSample[] = [];
    for (const object of drift.drifted.slice(0, DRIFT_SAMPLES))
      driftSamples.push({ ...object, ledger: await ledgerOf(db, object.object) });

    const attempts = faultFigures.lateWriteAttempts;
    const late = attempts.filter((a) => a.outcome === 'late-write');
    let overtaken = 0;
    for (const attempt of late) {
      const { rows } = await sql<{ n: number }>`
        select count(distinct resource_id)::int as n from ${sql.table(vpcOutbox.table)}
        where resource_id = any(${attempt.objects}::text[])
          and sent_at between to_timestamp(${attempt.heldAt / 1000}) and to_timestamp(${(attempt.answeredAt ?? attempt.heldAt) / 1000})`.execute(
        db,
      );
      overtaken += rows[0]?.n ?? 0;
    }
    const outcomes: Record<string, number> = {};
    for (const a of attempts) outcomes[a.outcome] = (outcomes[a.outcome] ?? 0) + 1;
    const { lateWriteAttempts: _attempts, ...faultCounts } = faultFigures;
    const workloadFigures = workload.figures();
    const order = {
      sentAtBackwards: [...sentAtBackwards],
      deliveredPastDeliverable: [...deliveredPastDeliverable],
      samples,
    };
    const { drifted, ...driftCounts } = drift;
    const lateObjects = new Set(late.flatMap((a) => a.objects));
    const unexplained = drifted.map((d) => d.object).filter((object) => !lateObjects.has(object));
    return {
      seed: options.seed,
      short: options.short,
      seconds: {
        faults: faultsSeconds,
        drain: drainSeconds,
        settle: options.settleS,
        total: (Date.now() - startedAt) / 1000,
      },
      workload: { ...workloadFigures, intents: workload.enqueued.size },
      faults: {
        ...faultCounts,
        lateWriteAttempts: attempts.length,
        lateWrites: late.length,
        lateWriteObjects: late.reduce((n, a) => n + a.objects.length, 0),
        lateWriteObjectsOvertaken: overtaken,
        lateWriteOutcomes: outcomes,
      },
      drainers: fleet.figures(),
      redrive,
      checks: {
        intents,
        order,
        drift: {
          ...driftCounts,
          objectsDrifted: drifted.length,
          objectsDriftedUnexplained: unexplained,
          samples: driftSamples,
        },
      },
      passed:
        intents.lost === 0 &&
        order.sentAtBackwards.length + order.deliveredPastDeliverable.length === 0 &&
        drifted.length === 0 &&
        fleet.figures().overlappingRequests === 0,
    };
  } finally {
    log('stopping everything the run started');
    await fleet?.stop().catch((error: unknown) => log(`stopping the drainers failed: ${String(error)}`));
    await db?.destroy().catch(() => undefined);
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    await openfga?.stop().catch((error: unknown) => log(`stopping OpenFGA failed: ${String(error)}`));
    await stack?.stop().catch((error: unknown) => log(`stopping the stack failed: ${String(error)}`));
  }
}
