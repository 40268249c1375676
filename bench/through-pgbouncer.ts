import { createDrainer } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueue, type AnyKysely } from '@outbox/outbox';
import { createDatabase, startPgBouncer, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { fill, kysely } from './bench-db.js';
import { count, knob, median, times } from './statistics.js';
import type { SectionResult } from './summary.js';

const WRITERS = 8;

const walLsn = async (db: AnyKysely): Promise<string> =>
  (await sql<{ lsn: string }>`select pg_current_wal_insert_lsn()::text as lsn`.execute(db)).rows[0]?.lsn as string;
/** WAL bytes written since `since` (the whole server's: nothing else runs on it meanwhile). */
const walSince = async (db: AnyKysely, since: string): Promise<number> =>
  Number(
    (
      await sql<{
        bytes: string;
      }>`select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), ${since}::pg_lsn)::text as bytes`.execute(db)
    ).rows[0]?.bytes,
  );

/** A rate per second, and the WAL written per intent. */
interface Measured {
  readonly rate: number;
  readonly walPerIntent: number;
}

/** `writes` one-intent transactions from WRITERS writers on `db`. */
async function enqueueRate(db: AnyKysely, table: string, writes: number): Promise<Measured> {
  const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
  await createOutboxTable(db, spec);
  let next = 0;
  const wal = await walLsn(db);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      for (let i = next++; i < writes; i = next++) {
        await db.transaction().execute((trx) =>
          enqueue(trx, spec, {
            partitionKey: `vpc:${i % 1000}`,
            payload: { writes: [{ user: 'user:a', relation: 'owner', object: `vpc:${i}` }] },
          }),
        );
      }
    }),
  );
  const rate = writes / ((performance.now() - started) / 1000);
  return { rate, walPerIntent: (await walSince(db, wal)) / writes };
}

/** A backlog of `rows` over 1,000 keys drained by one drainer (defaults, no-op sink) on `db`. */
async function drainRate(setupDb: AnyKysely, db: AnyKysely, table: string, rows: number): Promise<Measured> {
  const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
  await createOutboxTable(setupDb, spec);
  await fill(setupDb, spec, `'k' || (i % 1000)`, rows);
  const drainer = createDrainer({
    db,
    spec,
    sink: { deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })) },
    listen: false,
    logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
  });
  const wal = await walLsn(setupDb);
  const started = performance.now();
  let delivered = 0;
  while (delivered < rows) {
    const pass = await drainer.drainOnce();
    if (pass.delivered === 0) throw new Error(`bench pgbouncer: the drain stalled at ${delivered} of ${rows}`);
    delivered += pass.delivered;
  }
  const rate = rows / ((performance.now() - started) / 1000);
  const walPerIntent = (await walSince(setupDb, wal)) / rows;
  await drainer.stop();
  return { rate, walPerIntent };
}

/**
 * What PgBouncer in transaction mode costs (issue 32, docs/capacity.md): the same enqueues and the
 * same drain, straight to Postgres and through Debian's PgBouncer on loopback (pool size 10), in
 * alternating trials. Knobs: BENCH_PGBOUNCER_TRIALS (3), BENCH_PGBOUNCER_WRITES (4000),
 * BENCH_PGBOUNCER_ROWS (50000).
 */
export async function benchThroughPgBouncer(): Promise<SectionResult> {
  const trials = knob('BENCH_PGBOUNCER_TRIALS', 3);
  const writes = knob('BENCH_PGBOUNCER_WRITES', 4_000);
  const rows = knob('BENCH_PGBOUNCER_ROWS', 50_000);
  const stack = await startStack({ openfgaDatastore: 'memory', fastPostgres: false });
  const url = await createDatabase(stack.postgresUrl, 'bench_pgbouncer');
  const bouncer = await startPgBouncer({ postgresUrl: url, poolMode: 'transaction', poolSize: 10 });
  const direct = kysely(url, WRITERS);
  const pooled = kysely(bouncer.through(url), WRITERS);
  const results = {
    enqueue: { direct: [] as Measured[], pooled: [] as Measured[] },
    drain: { direct: [] as Measured[], pooled: [] as Measured[] },
  };
  try {
    for (let trial = 1; trial <= trials; trial += 1) {
      console.error(`[bench] pgbouncer: trial ${trial}…`);
      const order = trial % 2 === 1 ? (['direct', 'pooled'] as const) : (['pooled', 'direct'] as const);
      for (const via of order) {
        const db = via === 'direct' ? direct : pooled;
        results.enqueue[via].push(await enqueueRate(db, `bench.enqueue_${via}_${trial}`, writes));
        results.drain[via].push(await drainRate(direct, db, `bench.drain_${via}_${trial}`, rows));
      }
    }
  } finally {
    await Promise.all([direct.destroy(), pooled.destroy()]);
    await bouncer.stop();
    await stack.stop();
  }
  type Runs = { direct: Measured[]; pooled: Measured[] };
  const rates = (runs: Measured[]) => runs.map((r) => r.rate);
  const ratio = (r: Runs) => median(rates(r.pooled)) / median(rates(r.direct));
  const wal = (r: Runs) => count(median(r.direct.map((m) => m.walPerIntent)));
  const line = (name: string, r: Runs, unit: string) =>
    `| ${name} | ${rates(r.direct).map(count).join(', ')} ${unit} | ${rates(r.pooled).map(count).join(', ')} ${unit} | **${times(ratio(r))}** | ${wal(r)} B |`;
  return {
    markdown: [
      `### Through PgBouncer: ${trials} trials`,
      '',
      `The same work straight to Postgres and through PgBouncer (transaction mode, pool size 10, loopback):`,
      `${count(writes)} one-intent transactions from ${WRITERS} writers, and a drainer (defaults, no-op sink) on a`,
      `backlog of ${count(rows)} rows over 1,000 keys. Medians compared; each trial runs both, in turns first. WAL: the`,
      `server's, over the enqueues (with the table's trigger and indexes) and over the drain (the claims and settles).`,
      '',
      '| | direct | through PgBouncer | ÷ direct | WAL per intent (direct) |',
      '| --- | --- | --- | --- | --- |',
      line('enqueue', results.enqueue, 'intents/s'),
      line('drain', results.drain, 'rows/s'),
    ].join('\n'),
    targets: [
      {
        target: 'enqueue through PgBouncer ÷ direct (no target: its cost, docs/capacity.md)',
        figure: times(ratio(results.enqueue)),
        met: null,
      },
      {
        target: 'drain through PgBouncer ÷ direct (no target: its cost)',
        figure: times(ratio(results.drain)),
        met: null,
      },
    ],
  };
}
