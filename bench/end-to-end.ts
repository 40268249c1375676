import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  type OpenFgaClient,
  type TupleKey,
} from '@openfga/sdk';
import { DRAINER_DEFAULTS, type DrainerEvent } from '@outbox/drainer';
import { OPENFGA_SINK_DEFAULTS } from '@outbox/openfga';
import { createOutboxTable, defineOutbox, type AnyKysely } from '@outbox/outbox';
import { createDatabase, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { fill, kysely } from './bench-db.js';
import { freshStore, type OpenFgaTarget } from './openfga-store.js';
import { orderedDrain } from './ordered-drain.js';
import { checkOrder, describeOrder, type OrderCheck } from './order-check.js';
import { runPool } from './run-pool.js';
import { count, knob, median, times } from './statistics.js';
import { ratioTarget, type SectionResult } from './summary.js';

const TUPLES_PER_REQUEST = 100;

/** The tuples of intent i (1-based): a viewer and an editor of its partition's object, for a user of its own. */
const tuplesOf = (tag: string, i: number, partitions: number): TupleKey[] => {
  const object = `vpc:${tag}-${i % partitions}`;
  return [
    { user: `user:${tag}-${i}`, relation: 'viewer', object },
    { user: `user:${tag}-${i}`, relation: 'editor', object },
  ];
};
/** The same, as the SQL payload of row i with key k (`fill`'s expression). */
export const payloadSql = (tag: string) => `jsonb_build_object('writes', jsonb_build_array(
  jsonb_build_object('user', 'user:${tag}-' || i, 'relation', 'viewer', 'object', k),
  jsonb_build_object('user', 'user:${tag}-' || i, 'relation', 'editor', 'object', k)))`;

/** The direct ceiling: the same tuples in id order, 100 a Write, `inFlight` Writes at once. */
export async function direct(
  client: OpenFgaClient,
  tag: string,
  intents: number,
  partitions: number,
  inFlight: number,
): Promise<number> {
  const tuples = Array.from({ length: intents }, (_, n) => tuplesOf(tag, n + 1, partitions)).flat();
  const conflict = {
    onDuplicateWrites: ClientWriteRequestOnDuplicateWrites.Ignore,
    onMissingDeletes: ClientWriteRequestOnMissingDeletes.Ignore,
  };
  const requests = Array.from(
    { length: Math.ceil(tuples.length / TUPLES_PER_REQUEST) },
    (_, r) => () =>
      client.write(
        { writes: tuples.slice(r * TUPLES_PER_REQUEST, (r + 1) * TUPLES_PER_REQUEST) },
        { conflict, retryParams: { maxRetry: 0 } },
      ),
  );
  const started = performance.now();
  await runPool(requests, inFlight);
  return performance.now() - started;
}

/**
 * The order the viewer tuples landed in, per object, from the store's changelog (OpenFGA's own
 * order). The changes of one Write share its timestamp and land together (one transaction), and
 * the changelog lists them in an order of its own: only landings at different timestamps are ordered.
 */
export async function landedOrder(client: OpenFgaClient, tag: string): Promise<OrderCheck> {
  const byKey = new Map<string, Array<{ rank: number; at: string }>>();
  let continuationToken: string | undefined;
  for (let page = 0; page < 100_000; page += 1) {
    const response = await client.readChanges(
      { type: 'vpc' },
      { pageSize: 100, ...(continuationToken ? { continuationToken } : {}) },
    );
    for (const change of response.changes) {
      if (change.tuple_key.relation !== 'viewer') continue;
      const key = change.tuple_key.object;
      const landed = byKey.get(key) ?? [];
      landed.push({ rank: Number(change.tuple_key.user.slice(`user:${tag}-`.length)), at: String(change.timestamp) });
      byKey.set(key, landed);
    }
    if (response.changes.length === 0 || !response.continuation_token) break;
    continuationToken = response.continuation_token;
  }
  // Within one landing (consecutive changes of a key with one timestamp), rank order.
  const ordered = [...byKey].flatMap(([key, landed]) => {
    const runs: Array<typeof landed> = [];
    for (const change of landed) {
      const run = runs.at(-1);
      if (run && run[0]?.at === change.at) run.push(change);
      else runs.push([change]);
    }
    return runs.flatMap((run) => run.sort((a, b) => a.rank - b.rank)).map(({ rank }) => ({ key, rank }));
  });
  return checkOrder(ordered);
}

interface Loop {
  readonly name: string;
  readonly label: string;
  /** Drainers side by side (0: the direct SDK loop). */
  readonly workers: number;
  /** Batches each drainer keeps open. Default: the drainer's. */
  readonly concurrentBatches?: number;
  /** Without the late-write check: what item 1 of the agreement issue costs, against `drainer`. */
  readonly noLateWriteCheck?: true;
}

const LOOPS: readonly Loop[] = [
  {
    name: 'direct',
    label: `direct SDK, 100-tuple Writes, ${OPENFGA_SINK_DEFAULTS.maxConcurrentRequests} in flight (the sink's concurrency): the ceiling`,
    workers: 0,
  },
  {
    name: 'drainer',
    label: `**one drainer + OpenFGA sink, defaults** (batch ${DRAINER_DEFAULTS.batchSize}: 2 Writes a batch; ${DRAINER_DEFAULTS.concurrentBatches} batches open)`,
    workers: 1,
  },
  {
    name: 'nocheck',
    label: 'one drainer, defaults but `lateWrites: false` (no late-write check: its cost)',
    workers: 1,
    noLateWriteCheck: true,
  },
  {
    name: 'open1',
    label: 'one drainer, `concurrentBatches: 1` (one batch at a time: the drainer before open batches)',
    workers: 1,
    concurrentBatches: 1,
  },
  { name: 'open2', label: 'one drainer, `concurrentBatches: 2`', workers: 1, concurrentBatches: 2 },
  { name: 'open4', label: 'one drainer, `concurrentBatches: 4`', workers: 1, concurrentBatches: 4 },
  {
    name: 'four',
    label: 'four drainers, `concurrentBatches: 1` (the same overlap across drainers, as four processes)',
    workers: 4,
    concurrentBatches: 1,
  },
];

/**
 * End to end into a real OpenFGA with the postgres datastore, as production runs it: a backlog of
 * BENCH_E2E_INTENTS (10,000) intents of 2 tuples over BENCH_E2E_PARTITIONS (1,000) partitions,
 * drained by the drainer with the OpenFGA sink, against the direct-SDK ceiling on the same server;
 * each run on a fresh store, BENCH_E2E_TRIALS (3) interleaved trials. Per-partition order is read
 * back from OpenFGA's changelog.
 */
export async function benchEndToEnd(): Promise<SectionResult> {
  const intents = knob('BENCH_E2E_INTENTS', 10_000);
  const partitions = knob('BENCH_E2E_PARTITIONS', 1_000);
  const trials = knob('BENCH_E2E_TRIALS', 3);
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  const target: OpenFgaTarget = { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey };
  const runs = new Map<string, number[]>(LOOPS.map((loop) => [loop.name, []]));
  const orders = new Map<string, OrderCheck[]>(LOOPS.map((loop) => [loop.name, []]));
  // Where one default drainer's time goes: its claims, and its sink calls (the Writes), summed over its open batches.
  const split = { claimMs: 0, deliverMs: 0, wallMs: 0, batches: 0 };
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_e2e');
    db = kysely(url);
    for (let trial = 1; trial <= trials; trial += 1) {
      const shift = (trial - 1) % LOOPS.length;
      for (const loop of [...LOOPS.slice(shift), ...LOOPS.slice(0, shift)]) {
        console.error(`[bench] e2e: trial ${trial}, ${loop.name}…`);
        const tag = `${loop.name}${trial}`;
        const store = await freshStore(target);
        if (loop.workers === 0) {
          runs
            .get(loop.name)
            ?.push(await direct(store.client, tag, intents, partitions, OPENFGA_SINK_DEFAULTS.maxConcurrentRequests));
          continue;
        }
        const spec = defineOutbox({ table: `bench.e2e_${tag}`, partitionColumn: 'resource_id' });
        await createOutboxTable(db, spec);
        await fill(db, spec, `'vpc:${tag}-' || (i % ${partitions})`, intents, { payload: payloadSql(tag) });
        const onEvent = (event: DrainerEvent) => {
          if (loop.name !== 'drainer') return;
          if (event.type === 'batch-claimed') {
            split.claimMs += event.claimMs;
            split.batches += 1;
          } else if (event.type === 'delivered') split.deliverMs += event.deliverMs;
        };
        const run = await orderedDrain({
          url,
          spec,
          rows: intents,
          workers: loop.workers,
          batchSize: DRAINER_DEFAULTS.batchSize,
          sink: store.sink,
          onEvent,
          ...(loop.concurrentBatches ? { concurrentBatches: loop.concurrentBatches } : {}),
          ...(loop.noLateWriteCheck ? { lateWrites: false as const } : {}),
        });
        if (loop.name === 'drainer') split.wallMs += run.ms;
        runs.get(loop.name)?.push(run.ms);
        orders.get(loop.name)?.push(await landedOrder(store.client, tag));
        await sql.raw(`drop table "${spec.schema}"."${spec.tableName}"`).execute(db);
      }
    }
  } finally {
    await db?.destroy();
    await stack.stop();
  }
  const rate = (name: string) => intents / (median(runs.get(name) ?? []) / 1000);
  const ceiling = rate('direct');
  const worst = (name: string) =>
    (orders.get(name) ?? []).reduce<OrderCheck | undefined>(
      (a, b) => (!a || b.inversions > a.inversions ? b : a),
      undefined,
    );
  const perTrial = (name: string) =>
    (runs.get(name) ?? []).map((ms, i) => ((runs.get('direct')?.[i] as number) / ms).toFixed(2)).join(', ');
  const rows = LOOPS.map((loop) => {
    const order = worst(loop.name);
    const ratio = loop.workers === 0 ? '1.00×' : `${times(rate(loop.name) / ceiling)} (${perTrial(loop.name)})`;
    return `| ${loop.label} | ${count(rate(loop.name))} | ${count(rate(loop.name) * 2)} | ${ratio} | ${order ? describeOrder(order, partitions, 'partitions') : '—'} |`;
  });
  const defaultOrder = worst('drainer');
  const pct = (part: number) => `${Math.round((100 * part) / Math.max(split.wallMs, 1))} %`;
  return {
    markdown: [
      `### End to end into OpenFGA (postgres datastore): ${count(intents)} intents of 2 tuples over ${count(partitions)} partitions, median of ${trials} interleaved trials`,
      '',
      "The outbox and OpenFGA's datastore on the same stock Postgres, a fresh store per run. A drainer run starts on a",
      'filled backlog and ends when the last intent is recorded delivered; the direct run sends the same tuples, in',
      "id order. Order: per partition, the order its viewer tuples appear in the store's changelog (read back after the run;",
      'the tuples of one Write share a timestamp and land together, so only landings at different timestamps count).',
      '',
      '| path | intents/s | tuples/s | ÷ ceiling (trial by trial) | per-partition order in OpenFGA |',
      '| --- | ---: | ---: | --- | --- |',
      ...rows,
      '',
      `One default drainer (all trials, ${count(split.batches)} batches): its sink calls add up to ${(split.deliverMs / Math.max(split.wallMs, 1)).toFixed(2)}× its wall time ` +
        `(the mean number of batches delivering at once), ${(split.deliverMs / Math.max(split.batches, 1)).toFixed(1)} ms of Writes a batch; its claims to ${pct(split.claimMs)}. ` +
        "A drainer keeps up to `concurrentBatches` batches open, each claiming and delivering while the others' Writes are in flight",
      '(docs/design.md §5, "Open batches"); with one open batch, OpenFGA idles while each batch settles and the next is claimed.',
    ].join('\n'),
    targets: [
      ratioTarget(
        'end to end into OpenFGA (postgres datastore): drainer + sink, defaults ≥ 1.0× direct pipelined SDK writes',
        rate('drainer') / ceiling,
        { atLeast: 1 },
        `concurrentBatches 1: ${times(rate('open1') / ceiling)}; 2: ${times(rate('open2') / ceiling)}; 4: ${times(rate('open4') / ceiling)}; four drainers of one batch: ${times(rate('four') / ceiling)}`,
      ),
      ratioTarget(
        'late-write check (agreement item 1): one drainer with it ÷ without ≥ 0.95× (costs ≤ 5 %)',
        rate('drainer') / rate('nocheck'),
        { atLeast: 0.95 },
        `trial by trial: ${(runs.get('drainer') ?? []).map((ms, i) => ((runs.get('nocheck')?.[i] as number) / ms).toFixed(2)).join(', ')}`,
      ),
      {
        target: 'end to end: per-partition order in OpenFGA, 0 partitions out of order',
        figure: defaultOrder ? describeOrder(defaultOrder, partitions, 'partitions') : '—',
        met: defaultOrder ? [...orders.values()].flat().every((o) => o.keysOutOfOrder === 0) : undefined,
      },
    ],
  };
}
