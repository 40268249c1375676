import { createDrainer, type DrainerEvent, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueueMany, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { createDatabase, processes, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import pg from 'pg';
import { kysely } from './bench-db.js';
import { paceWriters } from './paced-writers.js';
import { count, knob, median, ms, percentile, sleep, sorted, times } from './statistics.js';
import { claimBatch } from '../packages/drainer/src/claim.js';
import type { SectionResult } from './summary.js';

// `pnpm bench xmin`: the drain with and without a session that holds a snapshot (idle in
// transaction) from before the load starts. Vacuum cannot remove the delivered rows' dead entries
// the claim index keeps at its left edge while that snapshot may still see them (docs/design.md §4).
const SECONDS = knob('BENCH_XMIN_SECONDS', 60);
/** Intents offered per second: below what the drainer reaches unpinned, so the unpinned run keeps up. */
const RATE = knob('BENCH_XMIN_RATE', 2_000);
const PER_TRANSACTION = 10;
const WRITERS = 4;
const PARTITIONS = 1_000;
/** After the writers stop, how long the drainer may take to deliver what is left (its own figure, not in the rate). */
const SETTLE_SECONDS = 120;

/**
 * CPU time used so far, in ms, by this process and the stack's Postgres (the postmaster `servers`
 * names, its live children and those that exited): other Postgres servers on a shared machine do not
 * count. Undefined where there is no /proc.
 */
function cpuMs(servers: readonly number[]): number | undefined {
  const all = processes();
  if (all.length === 0) return undefined;
  const own = process.cpuUsage();
  const postgres = all
    .filter((p) => p.name.startsWith('postgres') && (servers.includes(p.pid) || servers.includes(p.parent)))
    .reduce((sum, p) => sum + p.cpuMs + (servers.includes(p.pid) ? p.childrenCpuMs : 0), 0);
  return (own.user + own.system) / 1000 + postgres;
}

const noopSink: Sink = { deliver: async (intents) => intents.map(() => ({ kind: 'delivered' as const })) };
const payloadFor = (key: string) => ({ writes: [{ user: 'project:p', relation: 'project', object: key }] });

interface Run {
  readonly enqueued: number;
  readonly seconds: number;
  /** Delivered while the writers ran. */
  readonly delivered: number;
  /** Every batch's claim, in ms, sorted. */
  readonly claims: readonly number[];
  readonly cpuMsPer1000: number | undefined;
  /** Enqueued but not delivered when the writers stopped. */
  readonly backlog: number;
  /** Delivered per second after the writers stopped, until nothing was left or SETTLE_SECONDS passed; and what was left then. */
  readonly catchUp: { readonly rate: number; readonly left: number; readonly seconds: number };
  /** Every enqueue transaction (10 intents), in ms, sorted. */
  readonly enqueues: readonly number[];
  readonly deadTuples: number;
  readonly liveTuples: number;
  readonly autovacuums: number;
  readonly claimIndexMb: number;
  readonly tableMb: number;
  /** A claim after the drain (median of 20, rolled back), and the rows it found: none once everything is delivered, when it is what each wake-up pays. */
  readonly lastClaim: { readonly ms: number; readonly rows: number };
}

/** The table's dead and live row versions, autovacuum runs, and sizes, as the statistics have them now. */
async function tableState(db: AnyKysely, spec: OutboxSpec) {
  const { table, claimIndex } = tableNames(spec);
  const result = await sql<{ dead: string; live: string; autovacuums: string; claim: string; total: string }>`
    select n_dead_tup::text as dead, n_live_tup::text as live, autovacuum_count::text as autovacuums,
      pg_relation_size(${`"${spec.schema}"."${claimIndex}"`}::regclass)::text as claim,
      pg_total_relation_size(relid)::text as total
    from pg_stat_user_tables where relid = ${table}::regclass`.execute(db);
  const row = result.rows[0];
  return {
    deadTuples: Number(row?.dead),
    liveTuples: Number(row?.live),
    autovacuums: Number(row?.autovacuums),
    claimIndexMb: Number(row?.claim) / 1e6,
    tableMb: Number(row?.total) / 1e6,
  };
}

/**
 * Writers enqueue RATE intents/s for SECONDS into a fresh table while one drainer (defaults, LISTEN,
 * no-op sink) delivers them; with `pinned`, another session opened a REPEATABLE READ transaction,
 * took its snapshot and went idle before the table was even created, and holds it to the end.
 */
async function run(
  url: string,
  db: AnyKysely,
  servers: readonly number[],
  name: string,
  pinned: boolean,
): Promise<Run> {
  const spec = defineOutbox({ table: `bench.xmin_${name}`, partitionColumn: 'resource_id' });
  const holder = new pg.Client({ connectionString: url, application_name: 'bench-pinned-xmin' });
  await holder.connect();
  try {
    if (pinned) await holder.query('begin isolation level repeatable read; select 1');
    await createOutboxTable(db, spec);
    const writerDb = kysely(url, WRITERS);
    const drainerDb = kysely(url, 4);
    const claims: number[] = [];
    let delivered = 0;
    let counting = true;
    const onEvent = (event: DrainerEvent) => {
      if (event.type === 'batch-claimed' && counting) claims.push(event.claimMs);
      if (event.type === 'delivered') delivered += event.ids.length;
    };
    const drainer = createDrainer({
      db: drainerDb,
      spec,
      sink: noopSink,
      onEvent,
      listen: { connectionString: url },
    });
    await drainer.start();
    const cpuBefore = cpuMs(servers);
    let enqueued = 0;
    const enqueues: number[] = [];
    const { seconds } = await paceWriters({
      writers: WRITERS,
      rate: RATE / PER_TRANSACTION,
      seconds: SECONDS,
      write: async (i) => {
        const intents = Array.from({ length: PER_TRANSACTION }, (_, j) => {
          const partitionKey = `vpc:${(i * PER_TRANSACTION + j) % PARTITIONS}`;
          return { partitionKey, payload: payloadFor(partitionKey) };
        });
        const began = performance.now();
        await writerDb.transaction().execute((trx) => enqueueMany(trx, spec, intents));
        enqueues.push(performance.now() - began);
        enqueued += intents.length;
      },
    });
    const deliveredInTime = delivered;
    counting = false;
    const cpuAfter = cpuMs(servers);
    // What is left is delivered before the table is measured, within a bound: a lost intent would be
    // a bug, a slow one the catch-up figure.
    const catchUpFrom = performance.now();
    const deadline = catchUpFrom + SETTLE_SECONDS * 1000;
    while (delivered < enqueued && performance.now() < deadline) await sleep(50);
    const catchUpSeconds = (performance.now() - catchUpFrom) / 1000;
    const catchUp = {
      rate: (delivered - deliveredInTime) / Math.max(0.001, catchUpSeconds),
      left: enqueued - delivered,
      seconds: catchUpSeconds,
    };
    await drainer.stop();
    await Promise.all([drainerDb.destroy(), writerDb.destroy()]);
    // Their backends have exited and flushed their statistics; give the collector's readers a moment.
    await sleep(1_500);
    const state = await tableState(db, spec);
    const lastClaim = await claimAfter(db, spec);
    return {
      enqueued,
      seconds,
      delivered: deliveredInTime,
      claims: sorted(claims),
      cpuMsPer1000:
        cpuBefore === undefined || cpuAfter === undefined
          ? undefined
          : ((cpuAfter - cpuBefore) / Math.max(1, deliveredInTime)) * 1000,
      backlog: enqueued - deliveredInTime,
      catchUp,
      enqueues: sorted(enqueues),
      ...state,
      lastClaim,
    };
  } finally {
    await holder.end(); // ends the pinning transaction with its session
  }
}

/** The median of 20 claims of 100 on `spec`'s table, each rolled back, and the rows the last one found. */
async function claimAfter(db: AnyKysely, spec: OutboxSpec): Promise<{ ms: number; rows: number }> {
  const took: number[] = [];
  let rows = 0;
  for (let i = 0; i < 20; i += 1) {
    await db
      .transaction()
      .execute(async (trx) => {
        const began = performance.now();
        rows = (await claimBatch(trx, spec, 100)).intents.length;
        took.push(performance.now() - began);
        throw new Error('rollback');
      })
      .catch(() => undefined);
  }
  return { ms: median(took), rows };
}

const mean = (values: readonly number[]) => values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length);

/** The pinned-xmin benchmark (issue 30, item 4): one drain with nothing holding vacuum back, one with a session idle in transaction. */
export async function benchPinnedXmin(): Promise<SectionResult> {
  const stack = await startStack({ fastPostgres: false });
  try {
    const url = await createDatabase(stack.postgresUrl, `bench_xmin_${Date.now()}`);
    const db = kysely(url, 2);
    const unpinned = await run(url, db, stack.pids, 'unpinned', false);
    console.error(
      '[bench] xmin unpinned',
      JSON.stringify({ ...unpinned, claims: unpinned.claims.length, enqueues: unpinned.enqueues.length }),
    );
    await sql`drop table bench.xmin_unpinned`.execute(db);
    await sql`checkpoint`.execute(db);
    const pinned = await run(url, db, stack.pids, 'pinned', true);
    console.error(
      '[bench] xmin pinned',
      JSON.stringify({ ...pinned, claims: pinned.claims.length, enqueues: pinned.enqueues.length }),
    );
    await db.destroy();

    const rate = (r: Run) => r.delivered / r.seconds;
    const p99 = (r: Run) => percentile(r.claims, 0.99);
    const ratio = (f: (r: Run) => number | undefined) => {
      const [a, b] = [f(pinned), f(unpinned)];
      return a === undefined || b === undefined || !Number.isFinite(a / b) ? '—' : times(a / b);
    };
    const rows: ReadonlyArray<[string, (r: Run) => string, (r: Run) => number | undefined]> = [
      ['offered → enqueued (intents/s)', (r) => `${count(RATE)} → ${count(r.enqueued / r.seconds)}`, (r) => r.enqueued],
      ['**drain rate** (delivered while the writers ran, rows/s)', (r) => count(rate(r)), rate],
      ['left to deliver when the writers stopped', (r) => count(r.backlog), (r) => r.backlog],
      [
        'batches claimed (mean size)',
        (r) => `${count(r.claims.length)} (${(r.delivered / r.claims.length).toFixed(1)})`,
        (r) => r.claims.length,
      ],
      ['**claim, mean** (ms)', (r) => ms(mean(r.claims)), (r) => mean(r.claims)],
      ['**claim, p99** (ms)', (r) => ms(p99(r)), p99],
      [
        'after the writers stopped: what was left, delivered in (s), at (rows/s)',
        (r) =>
          `${r.catchUp.left > 0 ? `${count(r.catchUp.left)} still left after` : 'all in'} ${r.catchUp.seconds.toFixed(1)} s${r.backlog >= 1_000 ? `, ${count(r.catchUp.rate)}/s` : ''}`,
        (r) => (r.backlog >= 1_000 ? r.catchUp.rate : undefined),
      ],
      [
        'enqueue transaction of 10, mean / p99 (ms)',
        (r) => `${ms(mean(r.enqueues))} / ${ms(percentile(r.enqueues, 0.99))}`,
        (r) => mean(r.enqueues),
      ],
      [
        'a claim after the drain (median of 20, rolled back; rows found), ms',
        (r) => `${ms(r.lastClaim.ms)} (${r.lastClaim.rows} rows)`,
        (r) => r.lastClaim.ms,
      ],
      [
        "CPU per 1,000 delivered (this process and the stack's Postgres, ms)",
        (r) => (r.cpuMsPer1000 === undefined ? '—' : ms(r.cpuMsPer1000)),
        (r) => r.cpuMsPer1000,
      ],
      ['**dead row versions** at the end (`n_dead_tup`)', (r) => count(r.deadTuples), (r) => r.deadTuples],
      ['live row versions at the end (`n_live_tup`)', (r) => count(r.liveTuples), (r) => r.liveTuples],
      ['autovacuum runs of the table', (r) => count(r.autovacuums), (r) => r.autovacuums],
      ['**claim index** at the end (`pg_relation_size`, MB)', (r) => r.claimIndexMb.toFixed(2), (r) => r.claimIndexMb],
      ['table and its indexes at the end (MB)', (r) => r.tableMb.toFixed(1), (r) => r.tableMb],
    ];
    const markdown = [
      `### A pinned xmin: ${SECONDS} s of drain with and without a snapshot held open — \`BENCH_XMIN_SECONDS=${SECONDS} pnpm bench xmin\``,
      '',
      `${WRITERS} writers offer ${count(RATE)} intents/s (${PER_TRANSACTION} a transaction, ${count(PARTITIONS)} partitions); one drainer, defaults`,
      "(LISTEN, batch 100, 3 open batches), no-op sink; stock Postgres and autovacuum (the table's own settings,",
      `naptime 60 s). *Pinned*: another session ran \`begin isolation level repeatable read; select 1\` before the table`,
      'was created and stayed idle in transaction until the end. Each run on a fresh table, unpinned first. When the',
      `writers stop the drainer has up to ${SETTLE_SECONDS} s more to deliver what is left; then the table is measured, the pin still held.`,
      '',
      '| | unpinned | pinned | pinned ÷ unpinned |',
      '| --- | ---: | ---: | ---: |',
      ...rows.map(([label, show, value]) => `| ${label} | ${show(unpinned)} | ${show(pinned)} | ${ratio(value)} |`),
    ].join('\n');
    return {
      markdown,
      targets: [
        {
          target: `a snapshot held open (idle in transaction) for ${SECONDS} s under ${count(RATE)} intents/s: pinned ÷ unpinned`,
          figure: `drain rate ${ratio(rate)} (${count(rate(pinned))} vs ${count(rate(unpinned))} rows/s); claim mean ${ratio((r) => mean(r.claims))} (${ms(mean(pinned.claims))} vs ${ms(mean(unpinned.claims))} ms), p99 ${ratio(p99)} (${ms(p99(pinned))} vs ${ms(p99(unpinned))} ms); dead row versions ${count(pinned.deadTuples)} vs ${count(unpinned.deadTuples)}; claim index ${pinned.claimIndexMb.toFixed(1)} vs ${unpinned.claimIndexMb.toFixed(1)} MB`,
          met: null,
        },
      ],
    };
  } finally {
    await stack.stop();
  }
}
