import { createOutboxTable, defineOutbox, enqueueMany, type EnqueueInput, type AnyKysely } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql, type Kysely } from 'kysely';
import { expect, test } from 'vitest';
import { createDrainer, createRecordingSink, FlushPoisonedError, FlushTimeoutError } from './index.js';

/*
 * The head invariant of docs/design.md §5 under concurrent writers and drainers: after every committed
 * transaction each partition with a deliverable row has exactly one head, its earliest deliverable
 * row, and no other partition has one. Writers enqueue random batches (duplicate keys, savepoints
 * rolled back, whole transactions rolled back), two drainers deliver through a sink that fails
 * transiently or permanently at random, flushes of random partitions make their claims take those
 * partitions first, and a checker reads the committed state every few ms.
 */

const t = useTestDatabase();
const spec = defineOutbox({ table: 'race.outbox', partitionColumn: 'resource_id', maxAttempts: 3 });
const KEYS = ['vpc:a', 'vpc:b', 'vpc:c', 'vpc:d', 'vpc:e', 'vpc:e ', 'vpc:\u00e9', 'vpc:e\u0301'];
const payload = { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:v1' }] };

// Deterministic pseudo-randomness, so a failure can be replayed.
let seed = 42;
const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;

interface Violation {
  key: string;
  heads: string[] | null;
  earliest: string | null;
}

async function violations(db: AnyKysely): Promise<Violation[]> {
  const result = await sql<Violation>`
    select key, heads, earliest from (
      select resource_id as key,
             array_agg(id::text order by id) filter (where is_head) as heads,
             (min(id) filter (where sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts}))::text as earliest
      from race.outbox group by resource_id
    ) k
    where coalesce(array_length(heads, 1), 0) <> (case when earliest is null then 0 else 1 end)
       or (earliest is not null and heads[1] <> earliest)`.execute(db);
  return result.rows;
}

test('exactly one head per partition, the earliest deliverable row, under concurrent enqueues, savepoints and drains', async () => {
  await createOutboxTable(t.db, spec);
  const sink = createRecordingSink({
    outcome: () => {
      const roll = random();
      if (roll < 0.15) return { kind: 'transient', error: 'blip' };
      if (roll < 0.2) return { kind: 'permanent', error: 'refused' };
      return undefined;
    },
  });
  // Deadlocks are expected here (see the writer): detected after 20 ms instead of the default 1 s.
  const fastDeadlocks = '-c deadlock_timeout=20ms';
  const drainers = [0, 1].map(() =>
    createDrainer({
      db: t.kysely({ max: 2, options: fastDeadlocks }),
      spec,
      sink,
      batchSize: 7,
      backoff: { baseMs: 0, maxMs: 2 },
      listen: false,
    }),
  );
  let writing = true;
  const deadlocks = { writers: 0, drainers: 0 };
  const code = (error: unknown): string | undefined => {
    for (let e = error as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
      if (typeof e.code === 'string') return e.code;
    }
    return undefined;
  };
  const found: Violation[][] = [];

  const writer = async (db: Kysely<unknown>) => {
    for (let i = 0; i < 150; i += 1) {
      const batch = (): EnqueueInput[] =>
        Array.from({ length: 1 + Math.floor(random() * 4) }, () => ({ partitionKey: pick(KEYS), payload }));
      const mode = random();
      const trx = await db.startTransaction().execute();
      try {
        await enqueueMany(trx, spec, batch());
        if (mode < 0.3) {
          const savepoint = await trx.savepoint('s').execute();
          await enqueueMany(savepoint, spec, batch());
          await savepoint.rollbackToSavepoint('s').execute();
          await enqueueMany(trx, spec, batch());
        } else if (mode < 0.5) {
          const savepoint = await trx.savepoint('s').execute();
          await enqueueMany(savepoint, spec, batch());
          await savepoint.releaseSavepoint('s').execute();
        }
        if (mode > 0.85) await trx.rollback().execute();
        else await trx.commit().execute();
      } catch (error) {
        await trx.rollback().execute();
        // Two enqueue calls in one transaction take their locks in two rounds, each sorted but
        // not sorted together: a transaction doing the same in the other order deadlocks with it,
        // and Postgres aborts one of them. Everything else is a failure of the test.
        if (code(error) !== '40P01') throw error;
        deadlocks.writers += 1;
      }
    }
  };
  const drain = async (drainer: (typeof drainers)[number]) => {
    while (writing) {
      await drainer.drainOnce().catch((error: unknown) => {
        if (code(error) !== '40P01') throw error;
        deadlocks.drainers += 1;
      });
    }
  };
  // Read-your-writes callers: each flush puts its partition ahead in the claims until it ends.
  let flushes = 0;
  const flusher = async (drainer: (typeof drainers)[number]) => {
    while (writing) {
      await drainer.flush({ partitionKey: pick(KEYS), timeoutMs: 50 }).catch((error: unknown) => {
        if (!(error instanceof FlushTimeoutError || error instanceof FlushPoisonedError)) throw error;
      });
      flushes += 1;
    }
  };
  const check = async () => {
    while (writing) {
      const now = await violations(t.db);
      if (now.length > 0) found.push(now);
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
  };

  const writers = [0, 1, 2, 3].map(() => writer(t.kysely({ max: 2, options: fastDeadlocks })));
  const background = [...drainers.map(drain), ...drainers.map(flusher), check()];
  await Promise.all(writers);
  writing = false;
  await Promise.all(background);
  // Drain what is left, then the final state.
  for (let i = 0; i < 50; i += 1) await drainers[0]!.drainOnce();
  expect(found).toEqual([]);
  expect(await violations(t.db)).toEqual([]);
  expect(flushes).toBeGreaterThan(0);

  // Order: within each partition, each id reached the sink for the first time only after every
  // smaller id that reached it (replays of a batch rolled back by a deadlock come again, at least once).
  const first = new Map<string, bigint>();
  const delivered = new Set<string>();
  for (const intent of sink.delivered) {
    if (delivered.has(intent.id)) continue;
    delivered.add(intent.id);
    const previous = first.get(intent.partitionKey);
    expect(
      previous === undefined || BigInt(intent.id) > previous,
      `${intent.partitionKey} ${intent.id} after ${previous}`,
    ).toBe(true);
    first.set(intent.partitionKey, BigInt(intent.id));
  }
  // Keys differing by trailing space or Unicode normalisation are partitions of their own.
  const keys = await sql<{ key: string }>`select distinct resource_id as key from race.outbox order by 1`.execute(t.db);
  expect(keys.rows.map((r) => r.key).sort()).toEqual([...KEYS].sort());
  const left = await sql<{ n: number }>`
    select count(*)::int as n from race.outbox where sent_at is null and attempt_count < ${spec.maxAttempts}`.execute(
    t.db,
  );
  expect(left.rows[0]?.n).toBe(0);
}, 120_000);
