import { setTimeout as sleep } from 'node:timers/promises';
import { createDrainer, type Sink } from '@outbox/drainer';
import {
  createOutboxTable,
  defineOutbox,
  enqueueMany,
  type AnyKysely,
  type EnqueueInput,
  type OutboxSpec,
} from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { compactOutbox } from '@outbox/reconciler';
import { createDatabase, startStack } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { claimBatch } from '../packages/drainer/src/claim.js';
import { ratioTarget, type SectionResult } from './summary.js';

// `pnpm bench compaction`: intents pushed through one outbox while compaction keeps its retention
// (docs/ledger.md). 10M by default, the long run; BENCH_COMPACTION_ROWS for a smaller one.
const ROWS = Number(process.env.BENCH_COMPACTION_ROWS ?? 10_000_000);
/** A short retention stands for 30 days: what matters is rows delivered per retention. */
const RETENTION_MS = Number(process.env.BENCH_COMPACTION_RETENTION_MS ?? 10_000);
const KEYS = 10_000;
const WORKERS = 2;
const BATCH = 100;
/** Writers pause above this many pending rows, so the drain sets the pace. */
const MAX_BACKLOG = 20_000;

type Db = AnyKysely;
const kysely = (url: string, max = 2): Db =>
  new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max }) }) });
const noopSink: Sink = { deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })) };
const median = (values: readonly number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
const intent = (i: number): EnqueueInput => {
  const object = `vpc:v${i % KEYS}`;
  return {
    partitionKey: object,
    payload: {
      writes: [
        { user: 'project:p1', relation: 'project', object },
        { user: 'user:ann', relation: 'owner', object },
      ],
    },
  };
};

interface Run {
  readonly drainMs: number;
  readonly maxRows: number;
  readonly maxMb: number;
  readonly endRows: number;
  readonly endMb: number;
  readonly deleted: number;
  readonly compactMs: number;
}

async function tableState(db: Db, spec: OutboxSpec): Promise<{ rows: number; mb: number }> {
  const table = tableNames(spec).table;
  const result = await sql<{ rows: string; bytes: string }>`
    select (select n_live_tup from pg_stat_user_tables where relid = ${table}::regclass)::text as rows,
      pg_total_relation_size(${table}::regclass)::text as bytes`.execute(db);
  return { rows: Number(result.rows[0]?.rows), mb: Number(result.rows[0]?.bytes) / 1e6 };
}

/** Pushes `rows` intents through `spec` with two writers and two drainers, compacting every second when `compact`. */
async function push(url: string, db: Db, spec: OutboxSpec, rows: number, compact: boolean): Promise<Run> {
  let enqueued = 0;
  let delivered = 0;
  let running = true;
  let maxRows = 0;
  let maxMb = 0;
  let deleted = 0;
  let compactMs = 0;
  const writers = Array.from({ length: WORKERS }, async () => {
    const writer = kysely(url, 1);
    while (enqueued < rows) {
      if (enqueued - delivered > MAX_BACKLOG) {
        await sleep(5);
        continue;
      }
      const from = enqueued;
      const count = Math.min(1_000, rows - from);
      enqueued += count;
      await writer.transaction().execute((trx) =>
        enqueueMany(
          trx,
          spec,
          Array.from({ length: count }, (_, j) => intent(from + j)),
        ),
      );
    }
    await writer.destroy();
  });
  const started = performance.now();
  const drainers = Array.from({ length: WORKERS }, async () => {
    const drainDb = kysely(url);
    const drainer = createDrainer({
      db: drainDb,
      spec,
      sink: noopSink,
      batchSize: BATCH,
      listen: false,
      intervalMs: 3_600_000,
    });
    while (delivered < rows) {
      const result = await drainer.drainOnce();
      delivered += result.delivered;
      if (result.claimed === 0) await sleep(1);
    }
    await drainer.stop();
    await drainDb.destroy();
  });
  const compactor = (async () => {
    const compactDb = kysely(url, 1);
    while (compact && running) {
      const began = performance.now();
      deleted += (await compactOutbox({ db: compactDb, spec, retentionMs: RETENTION_MS })).deleted;
      compactMs += performance.now() - began;
      await sleep(1_000);
    }
    await compactDb.destroy();
  })();
  const sampler = (async () => {
    while (running) {
      await sleep(1_000);
      const state = await tableState(db, spec);
      maxRows = Math.max(maxRows, state.rows);
      maxMb = Math.max(maxMb, state.mb);
    }
  })();
  await Promise.all([...writers, ...drainers]);
  const drainMs = performance.now() - started;
  running = false;
  await Promise.all([compactor, sampler]);
  await sql.raw(`vacuum analyze ${tableNames(spec).table}`).execute(db);
  const end = await tableState(db, spec);
  return { drainMs, maxRows, maxMb, endRows: end.rows, endMb: end.mb, deleted, compactMs };
}

/** 1,000 keys of 10 pending rows, heads flagged as enqueue would, then the median of `rounds` rolled-back claims of 100. */
async function claimMs(db: Db, spec: OutboxSpec, rounds = 200): Promise<number> {
  const table = tableNames(spec).table;
  await sql
    .raw(
      `
    insert into ${table} (resource_id, payload, is_head)
    select k, '{"writes":[{"user":"user:a","relation":"owner","object":"vpc:1"}]}', row_number() over (partition by k order by i) = 1
    from (select i, 'backlog:' || (i % 1000) as k from generate_series(1, 10000) i) s order by i`,
    )
    .execute(db);
  await sql.raw(`analyze ${table}`).execute(db);
  const times: number[] = [];
  for (let i = 0; i < rounds; i += 1) {
    await db
      .transaction()
      .execute(async (trx) => {
        const began = performance.now();
        await claimBatch(trx, spec, BATCH);
        times.push(performance.now() - began);
        throw new Error('rollback');
      })
      .catch(() => undefined);
  }
  return median(times);
}

/** The compaction benchmark (issue 19): a bounded table, the claim beside an empty table's, compaction and drain rates. */
export async function benchCompaction(): Promise<SectionResult> {
  const stack = await startStack({ fastPostgres: false });
  try {
    const url = await createDatabase(stack.postgresUrl, `bench_compaction_${Date.now()}`);
    const db = kysely(url, 4);
    // Autovacuum visits a table at most once a naptime (60 s): scaled like the retention, or the
    // deleted rows' space would not be reusable within the run.
    await sql`alter system set autovacuum_naptime = '1s'`.execute(db);
    await sql`select pg_reload_conf()`.execute(db);
    const specs = Object.fromEntries(
      (['on', 'off', 'empty'] as const).map((name) => [
        name,
        defineOutbox({ table: `bench.compaction_${name}`, partitionColumn: 'resource_id' }),
      ]),
    ) as Record<'on' | 'off' | 'empty', OutboxSpec>;
    for (const spec of Object.values(specs)) await createOutboxTable(db, spec);
    const on = await push(url, db, specs.on, ROWS, true);
    console.error('[bench] compaction on', JSON.stringify(on));
    const off = await push(url, db, specs.off, ROWS, false);
    console.error('[bench] compaction off', JSON.stringify(off));
    const bytesPerRow = (off.endMb * 1e6) / off.endRows;
    await sql.raw(`vacuum full ${tableNames(specs.off).table}`).execute(db);
    const packedBytesPerRow = ((await tableState(db, specs.off)).mb * 1e6) / off.endRows;
    const claims = {
      empty: await claimMs(db, specs.empty),
      on: await claimMs(db, specs.on),
      off: await claimMs(db, specs.off),
    };
    // A last run from a standing start: the rate of compaction alone, nothing else running.
    const spec = specs.off;
    const began = performance.now();
    const alone = await compactOutbox({ db, spec, retentionMs: 0 });
    const aloneMs = performance.now() - began;
    await db.destroy();

    const rate = (rows: number, ms: number) => Math.round(rows / (ms / 1000)).toLocaleString('en');
    const implied = Math.round((ROWS / (on.drainMs / 1000)) * (RETENTION_MS / 1000));
    const markdown = [
      `### Compaction: ${ROWS.toLocaleString('en')} intents through one outbox, retention ${RETENTION_MS / 1000} s — \`BENCH_COMPACTION_ROWS=${ROWS} pnpm bench compaction\``,
      '',
      `${KEYS.toLocaleString('en')} partitions (register payloads of two tuples), ${WORKERS} writers (1,000 intents a transaction, paused above ${MAX_BACKLOG.toLocaleString('en')} pending),`,
      `${WORKERS} drainers (no-op sink, batch ${BATCH}); with compaction on, \`compactOutbox\` every second with the retention above. Stock Postgres (fsync on),`,
      '`autovacuum_naptime` 1 s (the 60 s default, scaled down with the retention).',
      '',
      '| | compaction on | compaction off |',
      '| --- | --- | --- |',
      `| drain throughput | ${rate(ROWS, on.drainMs)} rows/s | ${rate(ROWS, off.drainMs)} rows/s |`,
      `| largest table seen (live rows, sampled each second) | ${on.maxRows.toLocaleString('en')} | ${off.maxRows.toLocaleString('en')} |`,
      `| largest size seen (table + indexes) | ${on.maxMb.toFixed(0)} MB | ${off.maxMb.toFixed(0)} MB |`,
      `| at the end, after VACUUM | ${on.endRows.toLocaleString('en')} rows, ${on.endMb.toFixed(0)} MB | ${off.endRows.toLocaleString('en')} rows, ${off.endMb.toFixed(0)} MB |`,
      `| rows deleted while draining | ${on.deleted.toLocaleString('en')}, at ${rate(on.deleted, on.compactMs)} rows/s of compaction time | — |`,
      `| claim of 100 (median of 200, 1,000 pending keys of 10) | ${claims.on.toFixed(2)} ms | ${claims.off.toFixed(2)} ms |`,
      '',
      `What the retention implies: the drain rate × ${RETENTION_MS / 1000} s ≈ ${implied.toLocaleString('en')} rows, plus the ${KEYS.toLocaleString('en')} partitions'`,
      `last words, plus up to ${MAX_BACKLOG.toLocaleString('en')} pending. The claim on an empty table with the same backlog: ${claims.empty.toFixed(2)} ms.`,
      `A delivered row costs ${bytesPerRow.toFixed(0)} bytes on disk, indexes included (the table without compaction, vacuumed: the space its`,
      `updates left is reused, not returned), ${packedBytesPerRow.toFixed(0)} bytes packed (VACUUM FULL).`,
      `Compacting that table at once (retention 0, nothing else running): ${alone.deleted.toLocaleString('en')} rows in ${(aloneMs / 1000).toFixed(1)} s, ${rate(alone.deleted, aloneMs)} rows/s.`,
    ].join('\n');
    const bound = implied + KEYS + MAX_BACKLOG;
    const delivered = off.endRows.toLocaleString('en');
    return {
      markdown,
      targets: [
        {
          target: `compaction on (issue 19): the table stays bounded at what the retention implies (${ROWS.toLocaleString('en')} intents pushed)`,
          figure: `largest ${on.maxRows.toLocaleString('en')} live rows, ${(on.maxRows / bound).toFixed(2)}× the ${bound.toLocaleString('en')} implied; without compaction ${off.maxRows.toLocaleString('en')}`,
          met: null,
        },
        ratioTarget(
          'compaction on (issue 19): claim ≤ 1.2× an empty table',
          claims.on / claims.empty,
          { atMost: 1.2 },
          `${claims.on.toFixed(2)} vs ${claims.empty.toFixed(2)} ms`,
        ),
        ratioTarget(
          `claim beside ${delivered} delivered rows (compaction off) ≤ 1.2× an empty table (issue 23: 10M)`,
          claims.off / claims.empty,
          { atMost: 1.2 },
          `${claims.off.toFixed(2)} vs ${claims.empty.toFixed(2)} ms`,
        ),
        {
          target: 'compaction (issue 19): rows deleted per second of compaction time, and the drain rate beside it',
          figure: `${rate(on.deleted, on.compactMs)} rows/s while draining (${rate(alone.deleted, aloneMs)} alone); drain ${rate(ROWS, on.drainMs)} rows/s on, ${rate(ROWS, off.drainMs)} off`,
          met: null,
        },
      ],
    };
  } finally {
    await stack.stop();
  }
}
