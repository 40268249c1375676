import { createDrainer, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, type OutboxSpec, type AnyKysely } from '@outbox/outbox';
import { createDatabase, processes, startStack } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { existsSync } from 'node:fs';
import pg from 'pg';
import { claimBatch } from '../packages/drainer/src/claim.js';

const ROWS = 100_000;
const BATCH = 100;
const WORKERS = 2;

type Db = AnyKysely;
const kysely = (url: string, max = 4): Db => new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max }) }) });
/** Delivers nowhere; declares the OpenFGA sink's default write lifetime and reads back nothing, so the late-write check is on as with OpenFGA. */
const noopSink: Sink = {
  deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })),
  writeLifetimeMs: 13_000,
  readTuples: async () => [],
};
const payload = `'{"writes":[{"user":"user:a","relation":"owner","object":"vpc:1"}]}'::jsonb`;

/** The backlog shapes of docs/design.md §5: key expression over the row number i (1-based). */
const SHAPES: ReadonlyArray<{ name: string; key: string }> = [
  { name: '1000 keys interleaved', key: `'k' || (i % 1000)` },
  { name: '10 keys', key: `'k' || (i % 10)` },
  { name: 'one 50k-row key, then 1000 keys', key: `case when i <= 50000 then 'hot' else 'k' || (i % 1000) end` },
  { name: '100k distinct keys', key: `'k' || i` },
];

async function fill(db: Db, spec: OutboxSpec, key: string, rows: number, delivered = false): Promise<void> {
  const table = `"${spec.schema}"."${spec.tableName}"`;
  // is_head: the first row of each key, exactly as enqueue would have set it.
  await sql.raw(`
    insert into ${table} (resource_id, payload, is_head, sent_at)
    select k, ${payload}, ${delivered ? 'false' : 'row_number() over (partition by k order by i) = 1'}, ${delivered ? 'now()' : 'null'}
    from (select i, ${key} as k from generate_series(1, ${rows}) i) s order by i`).execute(db);
  await sql.raw(`vacuum analyze ${table}`).execute(db);
}

/**
 * The raw unordered loop the issue names: `FOR UPDATE SKIP LOCKED` by id, batch of 100, mark sent.
 * `columns` is what it reads: `id` alone (the bare loop), or what a sink needs to deliver
 * (`id, resource_id, payload, attempt_count`) — the same columns the ordered drainer reads.
 * `asyncCommit`: its session commits with `synchronous_commit = off`, as the drainer's transactions
 * do by default (the like-for-like baseline for that setting).
 */
async function rawLoop(url: string, table: string, columns = 'id', asyncCommit = false): Promise<number> {
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      if (asyncCommit) await client.query('set synchronous_commit = off');
      for (;;) {
        await client.query('begin');
        const { rows } = await client.query<{ id: string }>(
          `select ${columns} from ${table} where sent_at is null and retired_at is null order by id limit ${BATCH} for update skip locked`,
        );
        if (rows.length > 0) await client.query(`update ${table} set sent_at = now() where id = any($1::bigint[])`, [rows.map((r) => r.id)]);
        await client.query('commit');
        if (rows.length === 0) break;
      }
      await client.end();
    }),
  );
  return performance.now() - started;
}

async function orderedDrain(url: string, spec: OutboxSpec, rows: number, synchronousCommit = false, lateWrites = true): Promise<number> {
  const dbs = Array.from({ length: WORKERS }, () => kysely(url, 2));
  let delivered = 0;
  const started = performance.now();
  await Promise.all(
    dbs.map(async (db) => {
      const drainer = createDrainer({ db, spec, sink: noopSink, batchSize: BATCH, synchronousCommit, ...(lateWrites ? {} : { lateWrites: false }) });
      // A worker that finds every head taken by the other keeps polling, as a timer would, until
      // the whole backlog is delivered (with few partitions, one worker may hold all heads).
      while (delivered < rows) {
        const result = await drainer.drainOnce();
        delivered += result.delivered;
        if (result.claimed === 0) await new Promise((resolve) => setTimeout(resolve, 1));
      }
    }),
  );
  const elapsed = performance.now() - started;
  await Promise.all(dbs.map((db) => db.destroy()));
  return elapsed;
}

/**
 * Median time of a claim of `BATCH` (rolled back) on each of `specs`, taken in turns — one claim
 * on each table, then again — so that a drift of the machine during the measurement falls on
 * every table alike.
 */
async function claimMs(db: Db, specs: readonly OutboxSpec[], rounds = 200): Promise<number[]> {
  const times = specs.map((): number[] => []);
  for (let i = 0; i < rounds; i += 1) {
    for (const [n, spec] of specs.entries()) {
      await db
        .transaction()
        .execute(async (trx) => {
          const started = performance.now();
          await claimBatch(trx, spec, BATCH);
          times[n]?.push(performance.now() - started);
          throw new Error('rollback');
        })
        .catch(() => undefined);
    }
  }
  return times.map(median);
}

const rate = (rows: number, ms: number) => Math.round(rows / (ms / 1000));

/**
 * CPU time used so far, in ms: this process (both workers of every loop run in it) plus every
 * Postgres process (backends, WAL writer, checkpointer, autovacuum), read from /proc. Unlike wall
 * time it does not move with the VM's neighbours (stolen time is not counted), so it compares the
 * loops' work when throughput is too noisy to. Undefined where /proc is not there.
 */
function cpuMs(): number | undefined {
  if (!existsSync('/proc/self/stat')) return undefined;
  const own = process.cpuUsage();
  // Backends that closed are gone from /proc: their time is in the postmaster's children's time.
  const postgres = processes()
    .filter((p) => p.name.startsWith('postgres'))
    .reduce((sum, p) => sum + p.cpuMs + p.childrenCpuMs, 0);
  return (own.user + own.system) / 1000 + postgres;
}
/** What a drain loop leaves for later: the WAL it wrote, the table it leaves, the VACUUM that table then needs. */
interface LeftBehind {
  readonly walMb: number;
  readonly heapMb: number;
  readonly indexMb: number;
  readonly vacuumMs: number;
}

const walLsn = async (db: Db): Promise<string> =>
  (await sql<{ lsn: string }>`select pg_current_wal_insert_lsn()::text as lsn`.execute(db)).rows[0]?.lsn as string;

/**
 * Measured right after a loop drained `table`: WAL written since `walBefore` (the loop's updates,
 * row locks, on-access pruning and full-page images, plus whatever autovacuum did meanwhile), the
 * table's and its indexes' size, and how long a plain VACUUM of it then takes: what pruning as it
 * goes (or not) did to the table.
 */
async function leftBehind(db: Db, table: string, walBefore: string): Promise<LeftBehind> {
  const wal = await sql<{ bytes: string }>`select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), ${walBefore}::pg_lsn)::text as bytes`.execute(db);
  const size = await tableMb(db, table);
  const started = performance.now();
  await sql.raw(`vacuum ${table}`).execute(db);
  return { walMb: Number(wal.rows[0]?.bytes) / 1e6, ...size, vacuumMs: performance.now() - started };
}

async function tableMb(db: Db, table: string): Promise<{ heapMb: number; indexMb: number }> {
  const size = await sql<{ heap: string; indexes: string }>`
    select pg_table_size(${table}::regclass)::text as heap, pg_indexes_size(${table}::regclass)::text as indexes`.execute(db);
  return { heapMb: Number(size.rows[0]?.heap) / 1e6, indexMb: Number(size.rows[0]?.indexes) / 1e6 };
}

const median = (values: readonly number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

/** The drain benchmark (issue 4): ordered drain vs raw SKIP LOCKED per backlog shape, and claim cost vs delivered rows. */
export async function benchDrain(): Promise<string> {
  const stack = await startStack({ fastPostgres: false });
  const lines: string[] = [];
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_drain');
    const db = kysely(url);
    const trials = Number(process.env.BENCH_TRIALS ?? 3);
    const only = process.env.BENCH_SHAPES?.split(',').map(Number);
    lines.push(
      `### Drain throughput: ${ROWS / 1000}k intents, no-op sink, batch ${BATCH}, ${WORKERS} workers, median of ${trials} interleaved trials`,
      '',
      'Six loops per trial. Raw: the issue\'s unordered `FOR UPDATE SKIP LOCKED` loop reading only `id` (bare), the',
      'same loop reading what a sink needs (`id, resource_id, payload, attempt_count`, as the drainer does), and the',
      'bare loop with `synchronous_commit = off`. Ordered: @outbox/drainer as configured by default (its',
      'transactions commit asynchronously; the sink reads back, so the late-write check is on, as with OpenFGA), with',
      '`synchronousCommit: true`, and with `lateWrites: false`. The target (≥ 0.7×) is the default',
      'drainer against the bare loop (ratio of the medians; then each trial\'s own ratio: its loops run within a minute',
      'of each other); the last columns compare like with like on commit durability, and the late-write check\'s cost.',
      '',
      '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` | drainer, `lateWrites: false` | **drainer ÷ bare raw** | the same, trial by trial | drainer ÷ raw with sink columns | sync drainer ÷ bare raw | drainer ÷ async bare raw | drainer ÷ `lateWrites: false` (trial by trial) |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    );
    const kinds = ['bare', 'sink', 'bareAsync', 'ours', 'oursSync', 'oursOff'] as const;
    const byKind = <T>(value: (kind: (typeof kinds)[number]) => T) =>
      Object.fromEntries(kinds.map((k) => [k, value(k)])) as Record<(typeof kinds)[number], T>;
    const cpuLines: string[] = [];
    const stampLines: string[] = [];
    const afterLines: string[] = [];
    let filled: { heapMb: number; indexMb: number } | undefined;
    const ratio = (baseline: number, ours: number) => `${(baseline / ours).toFixed(2)}×`;
    let n = 0;
    for (const shape of SHAPES) {
      n += 1;
      if (only && !only.includes(n)) continue;
      const times = byKind((): number[] => []);
      const cpu = byKind((): number[] => []);
      const after = byKind((): LeftBehind[] => []);
      const stamped: number[] = [];
      for (let trial = 1; trial <= trials; trial += 1) {
        // Each trial starts with another loop, so a drift of the machine over a trial (checkpoints,
        // autovacuum, the VM's neighbours) does not always fall on the same loop.
        for (const kind of [...kinds.slice((trial - 1) % kinds.length), ...kinds.slice(0, (trial - 1) % kinds.length)]) {
          const spec = defineOutbox({ table: `bench.${kind.toLowerCase()}_${n}_${trial}`, partitionColumn: 'resource_id' });
          await createOutboxTable(db, spec);
          await fill(db, spec, shape.key, ROWS);
          const table = `"${spec.schema}"."${spec.tableName}"`;
          filled ??= await tableMb(db, table);
          const walBefore = await walLsn(db);
          const cpuBefore = cpuMs();
          const ms =
            kind === 'ours' || kind === 'oursSync' || kind === 'oursOff'
              ? await orderedDrain(url, spec, ROWS, kind === 'oursSync', kind !== 'oursOff')
              : await rawLoop(url, table, kind === 'sink' ? 'id, resource_id, payload, attempt_count' : 'id', kind === 'bareAsync');
          if (kind === 'ours') {
            const checks = await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(table)} where verify_after is not null`.execute(db);
            stamped.push(checks.rows[0]?.n ?? 0);
          }
          const left = await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(table)} where sent_at is null`.execute(db);
          if (left.rows[0]?.n !== 0) throw new Error(`${kind} drain left ${left.rows[0]?.n} rows undelivered`);
          const cpuAfter = cpuMs();
          times[kind].push(ms);
          if (cpuBefore !== undefined && cpuAfter !== undefined) cpu[kind].push(cpuAfter - cpuBefore);
          after[kind].push(await leftBehind(db, table, walBefore));
          await sql.raw(`drop table ${table}`).execute(db);
        }
      }
      const m = byKind((k) => median(times[k]));
      const rows = (ms: number) => `${rate(ROWS, ms).toLocaleString('en')} rows/s`;
      lines.push(
        `| ${shape.name} | ${rows(m.bare)} | ${rows(m.sink)} | ${rows(m.bareAsync)} | ${rows(m.ours)} | ${rows(m.oursSync)} | ` +
          `${rows(m.oursOff)} | **${ratio(m.bare, m.ours)}** | ${times.bare.map((bare, i) => (bare / (times.ours[i] as number)).toFixed(2)).join(', ')} | ` +
          `${ratio(m.sink, m.ours)} | ${ratio(m.bare, m.oursSync)} | ${ratio(m.bareAsync, m.ours)} | ` +
          `${ratio(m.oursOff, m.ours)} (${times.oursOff.map((off, i) => (off / (times.ours[i] as number)).toFixed(2)).join(', ')}) |`,
      );
      stampLines.push(`| ${shape.name} | ${stamped.join(', ')} |`);
      if (cpu.bare.length > 0) {
        const c = byKind((k) => median(cpu[k]));
        const perK = (ms: number) => (ms / (ROWS / 1000)).toFixed(1);
        cpuLines.push(
          `| ${shape.name} | ${perK(c.bare)} | ${perK(c.sink)} | ${perK(c.bareAsync)} | ${perK(c.ours)} | ${perK(c.oursSync)} | ${perK(c.oursOff)} | ` +
            `**${ratio(c.bare, c.ours)}** | ${ratio(c.sink, c.ours)} | ${ratio(c.bare, c.oursSync)} | ${ratio(c.bareAsync, c.ours)} | ${ratio(c.oursOff, c.ours)} |`,
        );
      }
      const left = (k: (typeof kinds)[number]) => {
        const pick = (field: keyof LeftBehind) => median(after[k].map((a) => a[field]));
        return `${pick('walMb').toFixed(0)} MB; ${pick('heapMb').toFixed(0)} + ${pick('indexMb').toFixed(0)} MB; ${Math.round(pick('vacuumMs'))} ms`;
      };
      afterLines.push(`| ${shape.name} | ${kinds.map(left).join(' | ')} |`);
      console.error(lines.at(-1), JSON.stringify({ times, cpu }, (_, v: unknown) => (typeof v === 'number' ? Math.round(v) : v)));
    }
    if (cpuLines.length > 0) {
      lines.push(
        '',
        'CPU time per 1,000 rows (ms; this process and every Postgres process, median of the same trials): what each',
        'loop costs the machine, whatever it waited for. On a machine of its own a CPU-bound drain runs at about the',
        'inverse of its CPU cost. Stolen time is not counted, but a VM\'s CPU time still moves with its neighbours, and',
        'background Postgres work (checkpoints, the WAL writer) lands on whichever loop is running.',
        '',
        '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` | drainer, `lateWrites: false` | **bare raw ÷ drainer** | raw with sink columns ÷ drainer | bare raw ÷ sync drainer | async bare raw ÷ drainer | `lateWrites: false` ÷ drainer |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
        ...cpuLines,
      );
    }
    lines.push(
      '',
      `Deliveries the default drainer stamped for a late-write check (per trial, of ${ROWS / 1000}k): each partition's last row of a`,
      'batch whose partition was delivered less than the delay (14 s) before; the checks come due after the run.',
      '',
      '| backlog shape | rows stamped |',
      '| --- | --- |',
      ...stampLines,
    );
    lines.push(
      '',
      'What each loop leaves behind (median of the same trials): WAL written during the drain; the table and its indexes',
      `after it (filled with ${ROWS / 1000}k pending rows they were ${filled?.heapMb.toFixed(0)} + ${filled?.indexMb.toFixed(0)} MB); then how long a plain VACUUM of the drained table`,
      'takes. A loop whose batches return to pages it updated before prunes them as it goes (CPU during the drain, a',
      'smaller table); one that leaves its dead versions for VACUUM puts the new ones on new pages and grows the table.',
      '',
      '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` | drainer, `lateWrites: false` |',
      '| --- | --- | --- | --- | --- | --- | --- |',
      ...afterLines,
    );
    if (process.env.BENCH_SKIP_CLAIM) {
      await db.destroy();
      return lines.join('\n');
    }

    // Claim cost against delivered rows: 1,000 pending heads, with 0 and with 1M delivered rows.
    const empty = defineOutbox({ table: 'bench.claim_empty', partitionColumn: 'resource_id' });
    const full = defineOutbox({ table: 'bench.claim_full', partitionColumn: 'resource_id' });
    await createOutboxTable(db, empty);
    await createOutboxTable(db, full);
    await fill(db, full, `'d' || i`, 1_000_000, true);
    await fill(db, empty, `'k' || (i % 1000)`, 10_000);
    await fill(db, full, `'k' || (i % 1000)`, 10_000);
    const [emptyMs = NaN, fullMs = NaN] = await claimMs(db, [empty, full]);

    // And what un-vacuumed delivered heads cost: drain 100k single-row keys, claim before and after VACUUM.
    const churn = defineOutbox({ table: 'bench.claim_churn', partitionColumn: 'resource_id' });
    await createOutboxTable(db, churn);
    await sql.raw(`alter table "bench"."claim_churn" set (autovacuum_enabled = false)`).execute(db);
    await fill(db, churn, `'c' || i`, 100_000);
    await orderedDrain(url, churn, 100_000);
    await fill(db, churn, `'k' || (i % 1000)`, 10_000);
    await sql.raw(`analyze "bench"."claim_churn"`).execute(db);
    const [dirtyMs = NaN] = await claimMs(db, [churn], 50);
    await sql.raw(`vacuum "bench"."claim_churn"`).execute(db);
    const [cleanMs = NaN] = await claimMs(db, [churn], 50);

    lines.push(
      '',
      `### Claim cost (median of 200 claims of ${BATCH} on each table, the tables in turns, rolled back; 1,000 pending keys of 10 rows)`,
      '',
      '| table | claim |',
      '| --- | --- |',
      `| no delivered rows | ${emptyMs.toFixed(2)} ms |`,
      `| 1M delivered rows (vacuumed) | ${fullMs.toFixed(2)} ms (${(fullMs / emptyMs).toFixed(2)}× empty) |`,
      `| 100k heads just delivered, not vacuumed | ${dirtyMs.toFixed(2)} ms |`,
      `| the same after VACUUM | ${cleanMs.toFixed(2)} ms |`,
    );
    await db.destroy();
  } finally {
    await stack.stop();
  }
  return lines.join('\n');
}
