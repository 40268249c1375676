import type { Intent } from '@outbox/drainer';
import type { OpenFgaSink } from '@outbox/openfga';
import type { TupleKey } from '@outbox/outbox';
import { startOpenFga, startStack } from '@outbox/test-stack';
import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  type OpenFgaClient,
} from '@openfga/sdk';
import { freshStore, type OpenFgaTarget } from './openfga-store.js';
import { runPool } from './run-pool.js';
import { count, median } from './statistics.js';
import { ratioTarget, type SectionResult, type TargetRow } from './summary.js';

const INTENTS = 5_000;
const TUPLES_PER_INTENT = 2;
const INTENTS_PER_DELIVER = 100; // the drainer's default batch
const LARGE_DELIVER = 500;
const TUPLES_PER_REQUEST = 100; // OpenFGA's limit
const TRIALS = 3;

interface Target extends OpenFgaTarget {
  readonly label: string;
  stop(): Promise<void>;
}

/** `INTENTS` register intents (a resource's project link and its owner), on fresh objects for `trial`. */
function intents(trial: string): Intent[] {
  return Array.from({ length: INTENTS }, (_, i) => ({
    id: String(i + 1),
    partitionKey: `vpc:${trial}-${i}`,
    attemptCount: 0,
    payload: {
      writes: [
        { user: `project:${trial}-${i % 50}`, relation: 'project', object: `vpc:${trial}-${i}` },
        { user: `user:${trial}-${i % 97}`, relation: 'owner', object: `vpc:${trial}-${i}` },
      ],
    },
  }));
}

/**
 * The same tuples straight through the SDK, 100 a request. `shape` `pipelined` keeps `inFlight`
 * requests going; `batched` sends them the way a drainer batch reaches the sink: the requests of
 * 100 intents together, then wait for all of them before the next batch.
 */
async function direct(
  client: OpenFgaClient,
  trial: string,
  inFlight: number,
  shape: 'pipelined' | 'batched',
): Promise<number> {
  const tuples: TupleKey[] = intents(trial).flatMap((intent) => [...(intent.payload.writes ?? [])]);
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
  if (shape === 'pipelined') {
    await runPool(requests, inFlight);
  } else {
    for (let i = 0; i < requests.length; i += inFlight)
      await Promise.all(requests.slice(i, i + inFlight).map((send) => send()));
  }
  return INTENTS / ((performance.now() - started) / 1_000);
}

/** Through the sink: deliver() calls of `perCall` intents, one after another, as a drainer makes them. */
async function throughSink(sink: OpenFgaSink, trial: string, perCall = INTENTS_PER_DELIVER): Promise<number> {
  const all = intents(trial);
  const signal = new AbortController().signal;
  const started = performance.now();
  for (let i = 0; i < all.length; i += perCall) {
    const outcomes = await sink.deliver(all.slice(i, i + perCall), { signal });
    const failed = outcomes.find((o) => o.kind !== 'delivered');
    if (failed) throw new Error(`bench: an intent was not delivered: ${JSON.stringify(failed)}`);
  }
  return INTENTS / ((performance.now() - started) / 1_000);
}

// A fresh store per run (freshStore): OpenFGA's memory datastore slows as a store fills, so runs must start equal.
async function measure(target: Target): Promise<{ rows: string[]; target: TargetRow }> {
  const warm = await freshStore(target);
  await direct(warm.client, 'warm-direct', 1, 'pipelined');
  await throughSink(warm.sink, 'warm-sink');
  const perCall = (INTENTS_PER_DELIVER * TUPLES_PER_INTENT) / TUPLES_PER_REQUEST;
  const runs = {
    sequential: [] as number[],
    pipelined: [] as number[],
    batched: [] as number[],
    sink: [] as number[],
    largeSink: [] as number[],
  };
  for (let trial = 0; trial < TRIALS; trial += 1) {
    // Interleaved, each on a fresh store, so drift in the machine's load hits all four alike.
    runs.sequential.push(await direct((await freshStore(target)).client, `d1-${trial}`, 1, 'pipelined'));
    runs.pipelined.push(await direct((await freshStore(target)).client, `d2-${trial}`, perCall, 'pipelined'));
    runs.batched.push(await direct((await freshStore(target)).client, `db-${trial}`, perCall, 'batched'));
    runs.sink.push(await throughSink((await freshStore(target)).sink, `s-${trial}`));
    runs.largeSink.push(await throughSink((await freshStore(target)).sink, `l-${trial}`, LARGE_DELIVER));
  }
  const sequential = median(runs.sequential);
  const pipelined = median(runs.pipelined);
  const batched = median(runs.batched);
  const viaSink = median(runs.sink);
  const ceiling = Math.max(sequential, pipelined);
  const row = (path: string, value: number, bold = false) => {
    const b = bold ? '**' : '';
    return `| ${target.label} | ${b}${path}${b} | ${b}${count(value)}${b} | ${count(value * TUPLES_PER_INTENT)} | ${b}${(value / ceiling).toFixed(2)}×${b} |`;
  };
  return {
    rows: [
      row('direct SDK, 1 request in flight', sequential),
      row(`direct SDK, ${perCall} requests in flight`, pipelined),
      row(`direct SDK, ${perCall} requests per 100 intents, awaited together`, batched),
      row(`sink.deliver, ${INTENTS_PER_DELIVER} intents a call`, viaSink, true),
      row(`sink.deliver, ${LARGE_DELIVER} intents a call (drainer batchSize ${LARGE_DELIVER})`, median(runs.largeSink)),
    ],
    target: ratioTarget(
      `OpenFGA sink ≥ 0.8× direct 100-tuple SDK writes, ${target.label} (issue 5)`,
      viaSink / ceiling,
      { atLeast: 0.8 },
      `${LARGE_DELIVER} intents a call: ${(median(runs.largeSink) / ceiling).toFixed(2)}×`,
    ),
  };
}

async function targets(): Promise<Target[]> {
  const envUrl = process.env.OPENFGA_API_URL;
  if (envUrl)
    return [
      { label: 'OPENFGA_API_URL', apiUrl: envUrl, token: process.env.OPENFGA_API_TOKEN, stop: async () => undefined },
    ];
  const memory = await startOpenFga({ datastore: 'memory' });
  try {
    const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
    return [
      { label: 'memory datastore', apiUrl: memory.apiUrl, token: undefined, stop: () => memory.stop() },
      {
        label: 'postgres datastore (stock)',
        apiUrl: stack.openfga.apiUrl,
        token: stack.openfga.presharedKey,
        stop: () => stack.stop(),
      },
    ];
  } catch (error) {
    await memory.stop();
    throw error;
  }
}

/**
 * Intents/s through the OpenFGA sink into a real OpenFGA, against the ceiling of direct SDK writes
 * of 100-tuple requests in the same run: 5,000 intents of 2 tuples each, delivered 100 intents a
 * call. Target: the sink reaches ≥ 0.8× the ceiling. Uses OPENFGA_API_URL (and OPENFGA_API_TOKEN)
 * when set, else starts OpenFGA with the memory and the postgres datastore, and stops them after.
 *
 * @example
 * console.log(await benchOpenFga());
 */
export async function benchOpenFga(): Promise<SectionResult> {
  const started = await targets();
  const rows: string[] = [];
  const summary: TargetRow[] = [];
  try {
    for (const target of started) {
      const measured = await measure(target);
      rows.push(...measured.rows);
      summary.push(measured.target);
    }
  } finally {
    for (const target of started) await target.stop();
  }
  const markdown = [
    '### OpenFGA sink',
    '',
    `${INTENTS.toLocaleString('en-US')} intents of ${TUPLES_PER_INTENT} tuples each into a fresh store per run, median of ${TRIALS} interleaved trials; ` +
      `the sink packs each call of ${INTENTS_PER_DELIVER} intents into ${(INTENTS_PER_DELIVER * TUPLES_PER_INTENT) / TUPLES_PER_REQUEST} requests of ${TUPLES_PER_REQUEST} tuples sent together. ` +
      'Ratio against the faster pipelined direct run, the ceiling (target ≥ 0.8×). The third row is what any sink can reach ' +
      'when the drainer hands it one batch at a time: the requests of a batch go together and the next batch waits for them.',
    '',
    '| OpenFGA | path | intents/s | tuples/s | vs ceiling |',
    '| --- | --- | ---: | ---: | ---: |',
    ...rows,
  ].join('\n');
  return { markdown, targets: summary };
}
