import { createOutboxTable, defineOutbox, type AnyKysely } from '@outbox/outbox';
import { createDatabase, processes, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { existsSync } from 'node:fs';
import pg from 'pg';
import { benchAgainstPgBoss } from './against-pg-boss.js';
import { fill, kysely } from './bench-db.js';
import { benchClaimCost } from './claim-cost.js';
import { orderedDrain } from './ordered-drain.js';
import { knob, median, sleep } from './statistics.js';
import type { SectionResult, TargetRow } from './summary.js';

const ROWS = knob('BENCH_DRAIN_ROWS', 100_000);
const BATCH = 100;
const WORKERS = 2;

type Db = AnyKysely;

/** The backlog shapes of docs/design.md §5: key expression over the row number i (1-based). */
const SHAPES: ReadonlyArray<{ name: string; key: string }> = [
  { name: '1000 keys interleaved', key: `'k' || (i % 1000)` },
  { name: '10 keys', key: `'k' || (i % 10)` },
  {
    name: `one ${ROWS / 2000}k-row key, then 1000 keys`,
    key: `case when i <= ${ROWS / 2} then 'hot' else 'k' || (i % 1000) end`,
  },
  { name: `${ROWS / 1000}k distinct keys`, key: `'k' || i` },
];

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
        if (rows.length > 0)
          await client.query(`update ${table} set sent_at = now() where id = any($1::bigint[])`, [
            rows.map((r) => r.id),
          ]);
        await client.query('commit');
        if (rows.length === 0) break;
      }
      await client.end();
    }),
  );
  return performance.now() - started;
}

const rate = (rows: number, ms: number) => Math.round(rows / (ms / 1000));

/**
 * CPU time used so far, in ms: this process (both workers of every loop run in it) plus every
 * Postgres process it started (backends, WAL writer, checkpointer, autovacuum), read from /proc. Unlike wall
 * time it does not move with the VM's neighbours (stolen time is not counted), so it compares the
 * loops' work when throughput is too noisy to. Undefined where /proc is not there.
 */
function cpuMs(): number | undefined {
  if (!existsSync('/proc/self/stat')) return undefined;
  const own = process.cpuUsage();
  // Only this process's own servers: another Postgres on the machine (a test run beside the bench)
  // would count its work as the loops'. Backends that closed are gone from /proc: their time is in
  // the postmaster's children's time.
  const all = processes();
  const parentOf = new Map(all.map((p) => [p.pid, p.parent]));
  const descends = (pid: number): boolean => {
    for (let at = parentOf.get(pid); at !== undefined && at > 1; at = parentOf.get(at))
      if (at === process.pid) return true;
    return false;
  };
  const postgres = all
    .filter((p) => p.name.startsWith('postgres') && descends(p.pid))
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

/** What Postgres did for a loop, from the database's cumulative statistics: load-independent, unlike its CPU time. */
interface PostgresWork {
  readonly transactions: number;
  /** Shared-buffer accesses (hits and reads): pages visited, the bulk of a backend's CPU here. */
  readonly buffers: number;
  readonly rowsUpdated: number;
}

/**
 * The database's counters so far. A backend reports its counters when it goes idle (at most once a
 * second) or exits; the loops close their connections, and the wait covers the rest.
 */
async function postgresWork(db: Db): Promise<PostgresWork> {
  await sleep(1_200);
  const row = (
    await sql<{ transactions: string; buffers: string; updated: string }>`
      select (xact_commit + xact_rollback)::text as transactions, (blks_hit + blks_read)::text as buffers,
             tup_updated::text as updated
      from pg_stat_database where datname = current_database()`.execute(db)
  ).rows[0];
  return { transactions: Number(row?.transactions), buffers: Number(row?.buffers), rowsUpdated: Number(row?.updated) };
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
  const wal = await sql<{
    bytes: string;
  }>`select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), ${walBefore}::pg_lsn)::text as bytes`.execute(db);
  const size = await tableMb(db, table);
  const started = performance.now();
  await sql.raw(`vacuum ${table}`).execute(db);
  return { walMb: Number(wal.rows[0]?.bytes) / 1e6, ...size, vacuumMs: performance.now() - started };
}

async function tableMb(db: Db, table: string): Promise<{ heapMb: number; indexMb: number }> {
  const size = await sql<{ heap: string; indexes: string }>`
    select pg_table_size(${table}::regclass)::text as heap, pg_indexes_size(${table}::regclass)::text as indexes`.execute(
    db,
  );
  return { heapMb: Number(size.rows[0]?.heap) / 1e6, indexMb: Number(size.rows[0]?.indexes) / 1e6 };
}

/**
 * The drain benchmark: ordered drain vs raw SKIP LOCKED per backlog shape (issue 4), against real
 * pg-boss (issue 23), and claim cost vs delivered rows. Knobs: BENCH_DRAIN_ROWS, BENCH_TRIALS,
 * BENCH_SHAPES (numbers; `0` for none), BENCH_SKIP_PGBOSS, BENCH_SKIP_CLAIM, and those of
 * {@link benchAgainstPgBoss} and {@link benchClaimCost}.
 */
export async function benchDrain(): Promise<SectionResult> {
  const stack = await startStack({ fastPostgres: false });
  const lines: string[] = [];
  const targets: TargetRow[] = [];
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_drain');
    const db = kysely(url);
    const trials = knob('BENCH_TRIALS', 3);
    const only = process.env.BENCH_SHAPES?.split(',').map(Number);
    lines.push(
      `### Drain throughput: ${ROWS / 1000}k intents, no-op sink, batch ${BATCH}, ${WORKERS} workers, median of ${trials} interleaved trials`,
      '',
      "Five loops per trial. Raw: the issue's unordered `FOR UPDATE SKIP LOCKED` loop reading only `id` (bare), the",
      'same loop reading what a sink needs (`id, resource_id, payload, attempt_count`, as the drainer does), and the',
      'bare loop with `synchronous_commit = off`. Ordered: @outbox/drainer as configured by default (its',
      'transactions commit asynchronously), and with `synchronousCommit: true`. The target (≥ 0.7×) is the default',
      "drainer against the bare loop (ratio of the medians; then each trial's own ratio: its five loops run within half a minute",
      'of each other); the last two columns compare like with like on commit durability.',
      '',
      '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` | **drainer ÷ bare raw** | the same, trial by trial | drainer ÷ raw with sink columns | sync drainer ÷ bare raw | drainer ÷ async bare raw |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    );
    const kinds = ['bare', 'sink', 'bareAsync', 'ours', 'oursSync'] as const;
    const byKind = <T>(value: (kind: (typeof kinds)[number]) => T) =>
      Object.fromEntries(kinds.map((k) => [k, value(k)])) as Record<(typeof kinds)[number], T>;
    const cpuLines: string[] = [];
    const afterLines: string[] = [];
    const workLines: string[] = [];
    let filled: { heapMb: number; indexMb: number } | undefined;
    const ratio = (baseline: number, ours: number) => `${(baseline / ours).toFixed(2)}×`;
    const shapeRatios: Array<{ name: string; ratio: number }> = [];
    let n = 0;
    for (const shape of SHAPES) {
      n += 1;
      if (only && !only.includes(n)) continue;
      const times = byKind((): number[] => []);
      const cpu = byKind((): number[] => []);
      const work = byKind((): PostgresWork[] => []);
      const after = byKind((): LeftBehind[] => []);
      for (let trial = 1; trial <= trials; trial += 1) {
        // Each trial starts with another loop, so a drift of the machine over a trial (checkpoints,
        // autovacuum, the VM's neighbours) does not always fall on the same loop.
        for (const kind of [
          ...kinds.slice((trial - 1) % kinds.length),
          ...kinds.slice(0, (trial - 1) % kinds.length),
        ]) {
          const spec = defineOutbox({
            table: `bench.${kind.toLowerCase()}_${n}_${trial}`,
            partitionColumn: 'resource_id',
          });
          await createOutboxTable(db, spec);
          await fill(db, spec, shape.key, ROWS);
          const table = `"${spec.schema}"."${spec.tableName}"`;
          filled ??= await tableMb(db, table);
          const walBefore = await walLsn(db);
          const workBefore = await postgresWork(db);
          const cpuBefore = cpuMs();
          const ms =
            kind === 'ours' || kind === 'oursSync'
              ? (
                  await orderedDrain({
                    url,
                    spec,
                    rows: ROWS,
                    workers: WORKERS,
                    batchSize: BATCH,
                    synchronousCommit: kind === 'oursSync',
                  })
                ).ms
              : await rawLoop(
                  url,
                  table,
                  kind === 'sink' ? 'id, resource_id, payload, attempt_count' : 'id',
                  kind === 'bareAsync',
                );
          const cpuAfter = cpuMs();
          const workAfter = await postgresWork(db);
          work[kind].push({
            transactions: workAfter.transactions - workBefore.transactions,
            buffers: workAfter.buffers - workBefore.buffers,
            rowsUpdated: workAfter.rowsUpdated - workBefore.rowsUpdated,
          });
          const left = await sql<{
            n: number;
          }>`select count(*)::int as n from ${sql.raw(table)} where sent_at is null`.execute(db);
          if (left.rows[0]?.n !== 0) throw new Error(`${kind} drain left ${left.rows[0]?.n} rows undelivered`);
          times[kind].push(ms);
          if (cpuBefore !== undefined && cpuAfter !== undefined) cpu[kind].push(cpuAfter - cpuBefore);
          after[kind].push(await leftBehind(db, table, walBefore));
          await sql.raw(`drop table ${table}`).execute(db);
        }
      }
      const m = byKind((k) => median(times[k]));
      shapeRatios.push({ name: shape.name, ratio: m.bare / m.ours });
      const rows = (ms: number) => `${rate(ROWS, ms).toLocaleString('en')} rows/s`;
      lines.push(
        `| ${shape.name} | ${rows(m.bare)} | ${rows(m.sink)} | ${rows(m.bareAsync)} | ${rows(m.ours)} | ${rows(m.oursSync)} | ` +
          `**${ratio(m.bare, m.ours)}** | ${times.bare.map((bare, i) => (bare / (times.ours[i] as number)).toFixed(2)).join(', ')} | ` +
          `${ratio(m.sink, m.ours)} | ${ratio(m.bare, m.oursSync)} | ${ratio(m.bareAsync, m.ours)} |`,
      );
      if (cpu.bare.length > 0) {
        const c = byKind((k) => median(cpu[k]));
        const perK = (ms: number) => (ms / (ROWS / 1000)).toFixed(1);
        cpuLines.push(
          `| ${shape.name} | ${perK(c.bare)} | ${perK(c.sink)} | ${perK(c.bareAsync)} | ${perK(c.ours)} | ${perK(c.oursSync)} | ` +
            `**${ratio(c.bare, c.ours)}** | ${ratio(c.sink, c.ours)} | ${ratio(c.bare, c.oursSync)} | ${ratio(c.bareAsync, c.ours)} |`,
        );
      }
      const workOf = (k: (typeof kinds)[number]) => {
        const pick = (field: keyof PostgresWork) => median(work[k].map((w) => w[field])) / (ROWS / 1000);
        return `${pick('transactions').toFixed(0)}; ${pick('buffers').toLocaleString('en', { maximumFractionDigits: 0 })}; ${pick('rowsUpdated').toLocaleString('en', { maximumFractionDigits: 0 })}`;
      };
      workLines.push(`| ${shape.name} | ${kinds.map(workOf).join(' | ')} |`);
      const left = (k: (typeof kinds)[number]) => {
        const pick = (field: keyof LeftBehind) => median(after[k].map((a) => a[field]));
        return `${pick('walMb').toFixed(0)} MB; ${pick('heapMb').toFixed(0)} + ${pick('indexMb').toFixed(0)} MB; ${Math.round(pick('vacuumMs'))} ms`;
      };
      afterLines.push(`| ${shape.name} | ${kinds.map(left).join(' | ')} |`);
      console.error(
        lines.at(-1),
        JSON.stringify({ times, cpu }, (_, v: unknown) => (typeof v === 'number' ? Math.round(v) : v)),
      );
    }
    if (cpuLines.length > 0) {
      lines.push(
        '',
        'CPU time per 1,000 rows (ms; this process and the Postgres it started, median of the same trials): what each',
        'loop costs the machine, whatever it waited for. On a machine of its own a CPU-bound drain runs at about the',
        "inverse of its CPU cost. Stolen time is not counted, but a VM's CPU time still moves with its neighbours, and",
        'background Postgres work (checkpoints, the WAL writer) lands on whichever loop is running.',
        '',
        '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` | **bare raw ÷ drainer** | raw with sink columns ÷ drainer | bare raw ÷ sync drainer | async bare raw ÷ drainer |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
        ...cpuLines,
      );
    }
    lines.push(
      '',
      "Postgres's work per 1,000 rows (median of the same trials, from the database's statistics): transactions;",
      'shared-buffer accesses (pages visited: most of what a backend spends CPU on here); rows updated. Unlike CPU',
      "time these do not move with the machine's load, so two runs on different days compare.",
      '',
      '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` |',
      '| --- | --- | --- | --- | --- | --- |',
      ...workLines,
      '',
      'What each loop leaves behind (median of the same trials): WAL written during the drain; the table and its indexes',
      `after it (filled with ${ROWS / 1000}k pending rows they were ${filled?.heapMb.toFixed(0)} + ${filled?.indexMb.toFixed(0)} MB); then how long a plain VACUUM of the drained table`,
      'takes. A loop whose batches return to pages it updated before prunes them as it goes (CPU during the drain, a',
      'smaller table); one that leaves its dead versions for VACUUM puts the new ones on new pages and grows the table.',
      '',
      '| backlog shape | raw, `id` only | raw, sink columns | raw, `id` only, async commit | drainer (default) | drainer, `synchronousCommit: true` |',
      '| --- | --- | --- | --- | --- | --- |',
      ...afterLines,
    );
    if (shapeRatios.length === 0) lines.length = 0;
    else {
      const low = Math.min(...shapeRatios.map((r) => r.ratio));
      const high = Math.max(...shapeRatios.map((r) => r.ratio));
      targets.push({
        target: `ordered drain (default) ≥ 0.7× raw unordered SKIP LOCKED, each backlog shape (issue 4)`,
        figure: `${low.toFixed(2)}×–${high.toFixed(2)}× (${shapeRatios.map((r) => `${r.name} ${r.ratio.toFixed(2)}×`).join(', ')})`,
        met: low >= 0.7,
      });
    }
    for (const [skip, part] of [
      ['BENCH_SKIP_PGBOSS', () => benchAgainstPgBoss(db, url)],
      ['BENCH_SKIP_CLAIM', () => benchClaimCost(db, url)],
    ] as const) {
      if (process.env[skip]) continue;
      const result = await part();
      lines.push('', result.markdown);
      targets.push(...result.targets);
    }
    await db.destroy();
  } finally {
    await stack.stop();
  }
  return { markdown: lines.join('\n').trim(), targets };
}
