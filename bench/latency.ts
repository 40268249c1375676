import { createDrainer, type DrainerEvent, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueue, enqueueMany, type AnyKysely } from '@outbox/outbox';
import { createDatabase, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { kysely } from './bench-db.js';
import { paceWriters } from './paced-writers.js';
import { commitToReadable, describeReadable } from './readable.js';
import { knob, ms, percentile, sleep } from './statistics.js';
import type { SectionResult } from './summary.js';

const WRITERS = 8;
const PARTITIONS = 1_000;
const SECONDS = knob('BENCH_LATENCY_SECONDS', 8);

type Db = AnyKysely;

/** One steady-state scenario: writers enqueue at `rate` intents/s (Infinity: as fast as they can) while one drainer runs. */
interface Scenario {
  readonly name: string;
  readonly rate: number;
  /** LISTEN (and the 1 s timer), the timer alone, or no drainer at all (what the writers reach alone). */
  readonly listen: boolean | 'no drainer';
  /** Each writer awaits `flush` for its partition after its commit, as an API handler would. */
  readonly flush: boolean;
}

const SCENARIOS: readonly Scenario[] = [
  { name: 'timer only (1 s)', rate: 200, listen: false, flush: false },
  { name: 'LISTEN', rate: 200, listen: true, flush: false },
  { name: 'LISTEN', rate: 500, listen: true, flush: false },
  { name: 'LISTEN', rate: Infinity, listen: true, flush: false },
  { name: 'no drainer (writers alone)', rate: Infinity, listen: 'no drainer', flush: false },
  { name: 'LISTEN, writer awaits flush', rate: 200, listen: true, flush: true },
  { name: 'LISTEN, writer awaits flush', rate: Infinity, listen: true, flush: true },
];

/** A payload naming `key`'s object. */
const payloadFor = (key: string) => ({ writes: [{ user: 'project:p', relation: 'project', object: key }] });

/** A sink that delivers everything after `delayMs`, noting in `delivered` when each intent reached it. */
function timingSink(delivered: Map<string, number>, delayMs = 0): Sink {
  return {
    deliver: async (intents) => {
      if (delayMs > 0) await sleep(delayMs);
      const now = performance.now();
      for (const intent of intents) delivered.set(intent.id, now);
      return intents.map(() => ({ kind: 'delivered' as const }));
    },
  };
}

interface Measured {
  readonly enqueued: number;
  readonly seconds: number;
  /** Batches the drainer claimed (while the writers ran and after, until every intent was delivered). */
  readonly batches: number;
  /** Commit (the writer's transaction resolved) to the sink's call, per intent, in ms, sorted. */
  readonly latency: readonly number[];
  /** Commit to `flush` resolved, per intent, in ms, sorted (flush scenarios). */
  readonly flushed: readonly number[];
}

async function run(url: string, writerDb: Db, scenario: Scenario, n: number): Promise<Measured> {
  const spec = defineOutbox({ table: `bench.latency_${n}`, partitionColumn: 'resource_id' });
  await createOutboxTable(writerDb, spec);
  const drainerDb = kysely(url, 2);
  const delivered = new Map<string, number>();
  const sink = timingSink(delivered);
  let batches = 0;
  const onEvent = (event: DrainerEvent) => {
    if (event.type === 'batch-claimed') batches += 1;
  };
  const drainer = createDrainer({
    db: drainerDb,
    spec,
    sink,
    onEvent,
    intervalMs: 1000,
    listen: scenario.listen === true ? { connectionString: url } : false,
  });
  if (scenario.listen !== 'no drainer') await drainer.start();
  const committed = new Map<string, number>();
  const flushed: number[] = [];
  const { seconds } = await paceWriters({
    writers: WRITERS,
    rate: scenario.rate,
    seconds: SECONDS,
    write: async (i) => {
      const partitionKey = `vpc:${i % PARTITIONS}`;
      const id = await writerDb
        .transaction()
        .execute((trx) => enqueue(trx, spec, { partitionKey, payload: payloadFor(partitionKey) }));
      const at = performance.now();
      committed.set(id, at);
      if (scenario.flush) {
        await drainer.flush({ partitionKey, timeoutMs: 30_000 });
        flushed.push(performance.now() - at);
      }
    },
  });
  // The last intents: give the drainer time to deliver them, then check nothing was lost.
  if (scenario.listen === 'no drainer') await drainer.drainOnce();
  const deadline = performance.now() + 30_000;
  while (delivered.size < committed.size && performance.now() < deadline) await sleep(20);
  await drainer.stop();
  await drainerDb.destroy();
  const missing = [...committed.keys()].filter((id) => !delivered.has(id));
  if (missing.length > 0)
    throw new Error(`${scenario.name}: ${missing.length} of ${committed.size} intents not delivered`);
  await sql.raw(`drop table bench.latency_${n}`).execute(writerDb);
  const latency =
    scenario.listen === 'no drainer'
      ? []
      : [...committed].map(([id, at]) => (delivered.get(id) as number) - at).sort((a, b) => a - b);
  return { enqueued: committed.size, seconds, batches, latency, flushed: flushed.sort((a, b) => a - b) };
}

const BACKLOG = knob('BENCH_BACKLOG', 20_000);
const SINK_MS_PER_CALL = 60; // about OpenFGA's pace measured by `pnpm bench openfga`: ~1,500 intents/s in calls of 100
const PROBES = 15;

/**
 * A backlog (after an outage, say): BACKLOG intents in as many partitions, then a drainer (defaults,
 * LISTEN) starts on them with a sink that takes SINK_MS_PER_CALL per call. Meanwhile a writer commits
 * one intent in a new partition every 200 ms, PROBES times, and either awaits `flush` for it (as an
 * API handler would) or does not (its intent then waits its turn in the claim order). Returns, per
 * probe, the ms from its commit to the flush resolving, or to the sink's call for its intent, and
 * what was left of the backlog after the last probe.
 */
async function behindBacklog(
  url: string,
  writerDb: Db,
  flush: boolean,
  n: number,
): Promise<{ waits: number[]; left: number; drainSeconds: number }> {
  const spec = defineOutbox({ table: `bench.backlog_${n}`, partitionColumn: 'resource_id' });
  await createOutboxTable(writerDb, spec);
  for (let i = 0; i < BACKLOG; i += 1_000) {
    await writerDb.transaction().execute((trx) =>
      enqueueMany(
        trx,
        spec,
        Array.from({ length: 1_000 }, (_, j) => ({
          partitionKey: `vpc:old-${i + j}`,
          payload: payloadFor(`vpc:old-${i + j}`),
        })),
      ),
    );
  }
  const drainerDb = kysely(url, 2);
  const delivered = new Map<string, number>();
  const sink = timingSink(delivered, SINK_MS_PER_CALL);
  const started = performance.now();
  const drainer = createDrainer({ db: drainerDb, spec, sink, listen: { connectionString: url } });
  await drainer.start();
  const waits: number[] = [];
  const probes: Array<{ id: string; at: number }> = [];
  for (let i = 0; i < PROBES; i += 1) {
    await sleep(200);
    const partitionKey = `vpc:new-${i}`;
    const id = await writerDb
      .transaction()
      .execute((trx) => enqueue(trx, spec, { partitionKey, payload: payloadFor(partitionKey) }));
    const at = performance.now();
    probes.push({ id, at });
    if (flush) {
      await drainer.flush({ partitionKey, timeoutMs: 120_000 });
      waits.push(performance.now() - at);
    }
  }
  const left = BACKLOG + PROBES - delivered.size;
  const deadline = performance.now() + 120_000;
  while (delivered.size < BACKLOG + PROBES && performance.now() < deadline) await sleep(20);
  const drainSeconds = (performance.now() - started) / 1000;
  await drainer.stop();
  await drainerDb.destroy();
  if (delivered.size < BACKLOG + PROBES)
    throw new Error(`behind a backlog: ${BACKLOG + PROBES - delivered.size} intents not delivered`);
  if (!flush) for (const probe of probes) waits.push((delivered.get(probe.id) as number) - probe.at);
  await sql.raw(`drop table bench.backlog_${n}`).execute(writerDb);
  return { waits: waits.sort((a, b) => a - b), left, drainSeconds };
}

/**
 * Steady state: writers enqueue (one intent per transaction, stock durability, 1,000 partitions)
 * while one drainer with the default settings delivers to a no-op sink, all in this process. How long
 * from a writer's commit until the sink is called, and until a writer's `flush` resolves.
 */
export async function benchLatency(): Promise<SectionResult> {
  const stack = await startStack({ fastPostgres: false, openfgaDatastore: 'postgres' });
  let writerDb: Db | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_latency');
    writerDb = kysely(url, WRITERS);
    const lines = [
      `### Steady state: ${WRITERS} writers, one intent per transaction over ${PARTITIONS.toLocaleString('en')} partitions, ${SECONDS} s; one drainer (defaults), no-op sink`,
      '',
      "Latency from a writer's commit (its transaction resolved) to the sink's call for that intent, and, where the",
      'writer awaits `flush` for its partition as an API handler would, to `flush` resolving. Writers, drainer and',
      'Postgres share the two cores; "as fast as they can" is what eight writers with fsync\'d commits reach here.',
      '',
      '| drainer wakes on | offered rate | enqueued | batches (mean size) | commit → sink p50 / p95 / p99 / max (ms) | commit → flush resolved p50 / p99 (ms) |',
      '| --- | --- | --- | --- | --- | --- |',
    ];
    let n = 0;
    for (const scenario of SCENARIOS) {
      n += 1;
      console.error(`[bench] latency: ${scenario.name} at ${scenario.rate}/s…`);
      const m = await run(url, writerDb, scenario, n);
      const l = m.latency;
      lines.push(
        `| ${scenario.name} | ${Number.isFinite(scenario.rate) ? `${scenario.rate.toLocaleString('en')}/s` : 'as fast as they can'} | ` +
          `${Math.round(m.enqueued / m.seconds).toLocaleString('en')}/s | ${m.batches.toLocaleString('en')} (${(m.enqueued / Math.max(m.batches, 1)).toFixed(1)}) | ` +
          `${l.length > 0 ? `${ms(percentile(l, 0.5))} / ${ms(percentile(l, 0.95))} / ${ms(percentile(l, 0.99))} / ${ms(l.at(-1) as number)}` : '—'} | ` +
          `${m.flushed.length > 0 ? `${ms(percentile(m.flushed, 0.5))} / ${ms(percentile(m.flushed, 0.99))}` : '—'} |`,
      );
    }
    lines.push(
      '',
      `### Behind a backlog: ${BACKLOG.toLocaleString('en')} intents in as many partitions, a sink taking ${SINK_MS_PER_CALL} ms a call of 100; one new intent every 200 ms`,
      '',
      'After an outage, say: the drainer (defaults, LISTEN) starts on the backlog, and a writer commits one intent',
      `in a new partition every 200 ms (${PROBES} of them). With \`flush\` its partition goes ahead of the backlog; without,`,
      'its intent waits its turn in the claim order (which is what a flush waited for before it took priority).',
      '',
      '| writer | commit → flush resolved, or → sink (ms): p50 / max | backlog left after the last probe | whole backlog drained in |',
      '| --- | --- | --- | --- |',
    );
    for (const flush of [true, false]) {
      n += 1;
      console.error(`[bench] latency: behind a backlog, ${flush ? 'with' : 'without'} flush…`);
      const b = await behindBacklog(url, writerDb, flush, n);
      lines.push(
        `| ${flush ? 'awaits `flush`' : 'does not flush (its intent → sink)'} | ${ms(percentile(b.waits, 0.5))} / ${ms(b.waits.at(-1) as number)} | ` +
          `${b.left.toLocaleString('en')} | ${b.drainSeconds.toFixed(1)} s |`,
      );
    }
    console.error('[bench] latency: commit → readable in OpenFGA…');
    const readable = describeReadable(
      await commitToReadable(
        url,
        writerDb,
        { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey },
        knob('BENCH_READABLE_SECONDS', 10),
      ),
    );
    return { markdown: [...lines, '', readable.markdown].join('\n'), targets: readable.targets };
  } finally {
    await writerDb?.destroy();
    await stack.stop();
  }
}
