import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  ConsistencyPreference,
  type OpenFgaClient,
} from '@openfga/sdk';
import { createDrainer, type Drainer, type DrainerEvent } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueue, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import { createDatabase, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { kysely } from './bench-db.js';
import { freshStore, type OpenFgaTarget } from './openfga-store.js';
import { count, knob, ms, percentile, sorted, times } from './statistics.js';
import type { SectionResult, TargetRow } from './summary.js';

const CALLERS = 32;
const USER = 'user:caller';
const PROJECT = 'project:bench';

type Path = 'naive' | 'outbox' | 'through';
const PATHS: readonly Path[] = ['naive', 'outbox', 'through'];

/** One run of a path: every request's latency (start → answer), sorted, the wall time, and the time of each step, summed. */
interface Run {
  readonly latencies: readonly number[];
  readonly ms: number;
  readonly steps: ReadonlyMap<string, number>;
}

/** The tuples a create writes: the resource's project link and its owner. */
const tuplesOf = (object: string) => [
  { user: PROJECT, relation: 'project', object },
  { user: USER, relation: 'owner', object },
];

interface Setup {
  readonly db: AnyKysely;
  readonly client: OpenFgaClient;
  readonly spec: OutboxSpec;
  readonly drainer: Drainer;
  /** Milliseconds spent in each step, summed over the run (the drainer's claims and Writes included). */
  readonly steps: Map<string, number>;
}

async function step<T>(steps: Map<string, number>, name: string, work: Promise<T>): Promise<T> {
  const started = performance.now();
  const result = await work;
  steps.set(name, (steps.get(name) ?? 0) + performance.now() - started);
  return result;
}

/** A create as the naive dual write does it: check, insert the row (its own commit), then OpenFGA's Write, then answer. */
async function naiveCreate({ db, client, steps }: Setup, object: string): Promise<void> {
  await step(steps, 'check', authorize(client));
  await step(
    steps,
    'row',
    sql`insert into bench.resources (id, project, owner) values (${object}, ${PROJECT}, ${USER})`.execute(db),
  );
  const conflict = {
    onDuplicateWrites: ClientWriteRequestOnDuplicateWrites.Ignore,
    onMissingDeletes: ClientWriteRequestOnMissingDeletes.Ignore,
  };
  await step(steps, 'Write', client.write({ writes: tuplesOf(object) }, { conflict }));
}

/** The outbox paths' first steps: the check, then the row and its intent in one transaction; the intent's id. */
async function checkAndCommit({ db, client, spec, steps }: Setup, object: string): Promise<string> {
  await step(steps, 'check', authorize(client));
  const transaction = db.transaction().execute(async (trx) => {
    await sql`insert into bench.resources (id, project, owner) values (${object}, ${PROJECT}, ${USER})`.execute(trx);
    return enqueue(trx, spec, { partitionKey: object, payload: { writes: tuplesOf(object) } });
  });
  return step(steps, 'row + intent', transaction);
}

/** A create through the outbox: check, the row and its intent in one transaction, then `flush` (read-your-writes), then answer. */
async function outboxCreate(setup: Setup, object: string): Promise<void> {
  const { drainer, steps } = setup;
  const id = await checkAndCommit(setup, object);
  // With the id enqueue returned, as the example services' settle passes it.
  await step(steps, 'flush', drainer.flush({ partitionKey: object, ids: [id], timeoutMs: 30_000 }));
}

/** A create with the write-through: check, the row and its intent, then the writer delivers its own head (`flush` only for what it left). */
async function throughCreate(setup: Setup, object: string): Promise<void> {
  const { drainer, steps } = setup;
  const id = await checkAndCommit(setup, object);
  const { deferred } = await step(steps, 'write-through', drainer.writeThrough([id]));
  if (deferred.length > 0)
    await step(steps, 'flush', drainer.flush({ partitionKey: object, ids: [id], timeoutMs: 30_000 }));
}

/** The check both paths make first, as a service authorizes a create (no cache: docs/design.md §8). */
async function authorize(client: OpenFgaClient): Promise<void> {
  const { allowed } = await client.check(
    { user: USER, relation: 'can_edit', object: PROJECT },
    { consistency: ConsistencyPreference.HigherConsistency },
  );
  if (!allowed) throw new Error('bench: the caller may not create in the project');
}

/** `callers` callers, each making `perCaller` creates one after another. */
async function run(setup: Setup, path: Path, tag: string, callers: number, perCaller: number): Promise<Run> {
  const create = { naive: naiveCreate, outbox: outboxCreate, through: throughCreate }[path];
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async (_, caller) => {
      for (let i = 0; i < perCaller; i += 1) {
        const at = performance.now();
        await create(setup, `vpc:${tag}-${caller}-${i}`);
        latencies.push(performance.now() - at);
      }
    }),
  );
  return { latencies: sorted(latencies), ms: performance.now() - started, steps: new Map(setup.steps) };
}

/** A fresh store with the caller allowed to create, and a drainer (LISTEN, defaults) with the OpenFGA sink on it, started for the outbox path. */
async function setUp(
  db: AnyKysely,
  url: string,
  target: OpenFgaTarget,
  spec: OutboxSpec,
  path: Path,
): Promise<Setup & { stop(): Promise<void> }> {
  const store = await freshStore(target);
  await store.client.write({ writes: [{ user: USER, relation: 'owner', object: PROJECT }] });
  const drainerDb = kysely(url, 2);
  const steps = new Map<string, number>();
  const onEvent = (event: DrainerEvent) => {
    if (event.type === 'batch-claimed')
      steps.set('claims (inside)', (steps.get('claims (inside)') ?? 0) + event.claimMs);
    if (event.type === 'delivered') steps.set('Writes (inside)', (steps.get('Writes (inside)') ?? 0) + event.deliverMs);
  };
  const drainer = createDrainer({ db: drainerDb, spec, sink: store.sink, listen: { connectionString: url }, onEvent });
  if (path !== 'naive') await drainer.start();
  return {
    db,
    client: store.client,
    spec,
    drainer,
    steps,
    async stop() {
      await drainer.stop();
      await drainerDb.destroy();
    },
  };
}

type Trial = Readonly<Record<Path, Run>>;

/**
 * The write path against the naive dual write (issue 23), at library level: a create authorizes
 * with a `check`, writes its row, and either calls OpenFGA's Write before answering (naive) or
 * enqueues the intent in the row's transaction and awaits `flush` (the drainer: defaults, LISTEN,
 * the OpenFGA sink), or delivers it itself with `drainer.writeThrough` (issue 31). OpenFGA with the postgres datastore on the same stock Postgres; a fresh store
 * per run. At 32 callers and with one, alternating trials (each runs both paths, in turns first).
 * Knobs: BENCH_WRITE_TRIALS (4), BENCH_WRITE_REQUESTS (per caller at 32 callers, 20), BENCH_WRITE_SINGLE (200).
 */
export async function benchWritePath(): Promise<SectionResult> {
  const trials = knob('BENCH_WRITE_TRIALS', 4);
  const perCaller = knob('BENCH_WRITE_REQUESTS', 20);
  const single = knob('BENCH_WRITE_SINGLE', 200);
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  const target: OpenFgaTarget = { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey };
  const concurrent: Trial[] = [];
  const alone: Trial[] = [];
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_write_path');
    db = kysely(url, CALLERS);
    await sql`create schema bench`.execute(db);
    await sql`create table bench.resources (id text primary key, project text not null, owner text not null, created_at timestamptz not null default now())`.execute(
      db,
    );
    const spec = defineOutbox({ table: 'bench.write_path_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(db, spec);
    const measure = async (path: Path, tag: string, callers: number, requests: number) => {
      const setup = await setUp(db as AnyKysely, url, target, spec, path);
      try {
        return await run(setup, path, tag, callers, requests);
      } finally {
        await setup.stop();
      }
    };
    for (const path of PATHS) await measure(path, `warm-${path}`, CALLERS, 2); // JIT, pools, plans
    for (let trial = 1; trial <= trials; trial += 1) {
      // Each path first in turn.
      const order = PATHS.map((_, i) => PATHS[(i + trial - 1) % PATHS.length] as Path);
      for (const [callers, requests, into] of [
        [CALLERS, perCaller, concurrent],
        [1, single, alone],
      ] as const) {
        console.error(`[bench] write-path: trial ${trial}, ${callers} caller(s)…`);
        const runs: Partial<Record<Path, Run>> = {};
        for (const path of order) runs[path] = await measure(path, `${path}-${trial}-${callers}`, callers, requests);
        into.push(runs as Trial);
      }
    }
  } finally {
    await db?.destroy();
    await stack.stop();
  }
  return report(concurrent, alone, perCaller, single);
}

const STEP_ORDER = [
  'check',
  'row',
  'row + intent',
  'Write',
  'write-through',
  'flush',
  'claims (inside)',
  'Writes (inside)',
];

/** `check 1.2 · row 0.8 · …`: each step's mean per create over `runs`. */
function breakdown(runs: readonly Run[]): string {
  const creates = runs.reduce((sum, r) => sum + r.latencies.length, 0);
  const names = STEP_ORDER.filter((name) => runs.some((r) => r.steps.has(name)));
  const total = runs.reduce((sum, r) => sum + r.latencies.reduce((a, b) => a + b, 0), 0);
  const parts = names.map(
    (name) => `${name} ${ms(runs.reduce((sum, r) => sum + (r.steps.get(name) ?? 0), 0) / creates)}`,
  );
  return `${parts.join(' · ')} (total ${ms(total / creates)})`;
}

function report(
  concurrent: readonly Trial[],
  alone: readonly Trial[],
  perCaller: number,
  single: number,
): SectionResult {
  const throughput = (r: Run) => r.latencies.length / (r.ms / 1000);
  const p = (r: Run, q: number) => percentile(r.latencies, q);
  const cells = (t: Trial, path: Path) =>
    `**${times(throughput(t[path]) / throughput(t.naive))}** | **${times(p(t[path], 0.5) / p(t.naive, 0.5))}** | ` +
    `**${times(p(t[path], 0.99) / p(t.naive, 0.99))}**`;
  const line = (t: Trial, i: number, callers: number) =>
    `| ${i + 1} | ${callers} | ${PATHS.map((path) => count(throughput(t[path]))).join(' / ')} req/s | ` +
    `${PATHS.map((path) => ms(p(t[path], 0.5))).join(' / ')} | ${PATHS.map((path) => ms(p(t[path], 0.99))).join(' / ')} | ` +
    `${cells(t, 'outbox')} | ${cells(t, 'through')} |`;
  const range = (values: readonly number[]) => `${Math.min(...values).toFixed(2)}×–${Math.max(...values).toFixed(2)}×`;
  const ratio = (trials: readonly Trial[], path: Path, f: (r: Run) => number) =>
    trials.map((t) => f(t[path]) / f(t.naive));
  const tput = ratio(concurrent, 'through', throughput);
  const p99 = ratio(concurrent, 'through', (r) => p(r, 0.99));
  const p50 = ratio(alone, 'through', (r) => p(r, 0.5));
  const p99Alone = ratio(alone, 'through', (r) => p(r, 0.99));
  const targets: TargetRow[] = [
    {
      target: `write path at ${CALLERS} callers: write-through ÷ naive dual write, throughput ≥ 1.0× in every trial`,
      figure: range(tput),
      met: tput.every((r) => r >= 1),
    },
    {
      target: `write path at ${CALLERS} callers: write-through ÷ naive, p99 latency ≤ 1.0× in every trial`,
      figure: range(p99),
      met: p99.every((r) => r <= 1),
    },
    {
      target: 'write path, one caller: write-through ÷ naive, p50 latency ≤ 1.3×',
      figure: range(p50),
      met: p50.every((r) => r <= 1.3),
    },
    {
      target: 'write path, one caller: write-through ÷ naive, p99 latency ≤ 1.5×',
      figure: range(p99Alone),
      met: p99Alone.every((r) => r <= 1.5),
    },
    {
      target: 'write path, one caller: outbox + flush (no write-through) ÷ naive, p50 latency',
      figure: range(ratio(alone, 'outbox', (r) => p(r, 0.5))),
      met: null,
    },
  ];
  return {
    markdown: [
      `### The write path against the naive dual write: ${CALLERS} callers × ${perCaller} creates, and one caller × ${single}, ${concurrent.length} trials`,
      '',
      'A create authorizes with a `check` (higher consistency, as the services do), writes its row, and then either calls',
      "OpenFGA's Write before answering (naive: two commits, no ordering, nothing to retry a lost Write), or enqueues the",
      "intent in the row's transaction and awaits `flush` for its partition (outbox: one drainer, defaults, LISTEN, the",
      'OpenFGA sink), or enqueues it and delivers it itself with `drainer.writeThrough`, flushing only what that left',
      '(write-through: the same drainer). OpenFGA on the postgres datastore of the same stock Postgres, a fresh store per',
      'run; every trial runs the three paths, each first in turn. Latency: from the check to the answer. Figures: naive /',
      'outbox / write-through, then each ÷ naive.',
      '',
      '| trial | callers | throughput | p50 (ms) | p99 (ms) | outbox ÷: tput | p50 | p99 | write-through ÷: tput | p50 | p99 |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
      ...concurrent.map((t, i) => line(t, i, CALLERS)),
      ...alone.map((t, i) => line(t, i, 1)),
      '',
      "One caller, where a create's time goes (ms per create, mean over the trials; the drainer's claims and Writes are",
      'inside `flush` or the write-through, which also hold the settle):',
      '',
      ...PATHS.map((path) => `- ${path}: ${breakdown(alone.map((t) => t[path]))}`),
    ].join('\n'),
    targets,
  };
}
