import { ConsistencyPreference, type OpenFgaClient, type TupleKey } from '@openfga/sdk';
import { createDrainer, DRAINER_DEFAULTS, type DrainerEvent, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueue, type AnyKysely } from '@outbox/outbox';
import { sql } from 'kysely';
import { kysely } from './bench-db.js';
import { freshStore, type OpenFgaTarget } from './openfga-store.js';
import { paceWriters } from './paced-writers.js';
import { knob, ms, percentile, sleep, sorted } from './statistics.js';
import type { TargetRow } from './summary.js';

const RATE = 200;
const PARTITIONS = 1_000;
const WRITERS = 8;
/** The drainer's open batches: its default unless BENCH_READABLE_BATCHES says (1 is the drainer of one batch at a time). */
const OPEN_BATCHES = knob('BENCH_READABLE_BATCHES', DRAINER_DEFAULTS.concurrentBatches);

/** Commit → readable, per intent, and how many reads it took. */
export interface Readable {
  /** ms from the writer's commit to the return of the first `read` of the exact tuple that found it, sorted. */
  readonly latencies: readonly number[];
  /** The same to that read's start, sorted: the tuple became readable between the two. */
  readonly toReadStart: readonly number[];
  /** Reads that came back empty before the one that found the tuple. */
  readonly emptyReads: number;
  readonly commits: number;
  readonly seconds: number;
  /** The drainer's batches, and the time its sink calls (the Writes) took, summed. */
  readonly batches: number;
  readonly writeMs: number;
  /** The time the finding reads took, summed (a latency ends when its read returns). */
  readonly readMs: number;
}

/** Reads `tuple` until OpenFGA returns it; resolves with the time it did and the empty reads before. */
async function readUntilFound(
  client: OpenFgaClient,
  tuple: TupleKey,
): Promise<{ at: number; started: number; empty: number; readMs: number }> {
  for (let empty = 0; empty < 5_000; empty += 1) {
    const started = performance.now();
    const { tuples } = await client.read(
      { user: tuple.user, relation: tuple.relation, object: tuple.object },
      { pageSize: 1, consistency: ConsistencyPreference.HigherConsistency },
    );
    if (tuples.length > 0) return { at: performance.now(), empty, readMs: performance.now() - started, started };
    await sleep(2);
  }
  throw new Error(`bench: ${tuple.object}#${tuple.relation}@${tuple.user} never became readable`);
}

/**
 * Commit → tuple readable in a real OpenFGA (issue 23): writers commit one intent per transaction at
 * 200/s over 1,000 partitions for `seconds`; one drainer (defaults, LISTEN) delivers through the
 * OpenFGA sink. Each intent's tuple is read (`read` of the exact key) as soon as the sink call that
 * carried it returns, again every 2 ms until found: the first read that finds it ends its latency.
 */
export async function commitToReadable(
  url: string,
  db: AnyKysely,
  target: OpenFgaTarget,
  seconds: number,
): Promise<Readable> {
  const spec = defineOutbox({ table: 'bench.readable', partitionColumn: 'resource_id' });
  await createOutboxTable(db, spec);
  const store = await freshStore(target);
  const committedAt = new Map<string, number>();
  const found: Array<Promise<{ at: number; started: number; empty: number; readMs: number; id: string }>> = [];
  let batches = 0;
  let writeMs = 0;
  const probing: Sink = {
    deliver: async (intents, context) => {
      const outcomes = await store.sink.deliver(intents, context);
      for (const [i, intent] of intents.entries()) {
        const tuple = intent.payload.writes?.[0];
        if (outcomes[i]?.kind === 'delivered' && tuple)
          found.push(readUntilFound(store.client, tuple).then((r) => ({ ...r, id: intent.id })));
      }
      return outcomes;
    },
  };
  // A connection per open batch, and one for the late-write check.
  const drainerDb = kysely(url, OPEN_BATCHES + 1);
  const onEvent = (event: DrainerEvent) => {
    if (event.type === 'batch-claimed') batches += 1;
    else if (event.type === 'delivered') writeMs += event.deliverMs;
  };
  const drainer = createDrainer({
    db: drainerDb,
    spec,
    sink: probing,
    concurrentBatches: OPEN_BATCHES,
    listen: { connectionString: url },
    onEvent,
  });
  await drainer.start();
  let paced: { written: number; seconds: number };
  try {
    paced = await paceWriters({
      writers: WRITERS,
      rate: RATE,
      seconds,
      write: async (i) => {
        const object = `vpc:r-${i % PARTITIONS}`;
        const payload = { writes: [{ user: `user:r-${i}`, relation: 'viewer', object }] };
        const id = await db.transaction().execute((trx) => enqueue(trx, spec, { partitionKey: object, payload }));
        committedAt.set(id, performance.now());
      },
    });
    const deadline = performance.now() + 30_000;
    while (found.length < committedAt.size && performance.now() < deadline) await sleep(20);
  } finally {
    await drainer.stop();
    await drainerDb.destroy();
  }
  const reads = await Promise.all(found);
  if (reads.length !== committedAt.size)
    throw new Error(`bench: ${committedAt.size - reads.length} of ${committedAt.size} intents never delivered`);
  await sql.raw(`drop table bench.readable`).execute(db);
  return {
    latencies: sorted(reads.map((r) => r.at - (committedAt.get(r.id) as number))),
    toReadStart: sorted(reads.map((r) => r.started - (committedAt.get(r.id) as number))),
    emptyReads: reads.reduce((sum, r) => sum + r.empty, 0),
    commits: paced.written,
    seconds: paced.seconds,
    batches,
    writeMs,
    readMs: reads.reduce((sum, r) => sum + r.readMs, 0),
  };
}

/** Its markdown and summary rows. */
export function describeReadable(r: Readable): { markdown: string; targets: TargetRow[] } {
  const p50 = percentile(r.latencies, 0.5);
  const p99 = percentile(r.latencies, 0.99);
  return {
    markdown: [
      `### Commit → tuple readable in OpenFGA (postgres datastore): ${RATE} commits/s over ${PARTITIONS.toLocaleString('en-US')} partitions, LISTEN, one drainer (defaults${OPEN_BATCHES === DRAINER_DEFAULTS.concurrentBatches ? '' : `, but ${OPEN_BATCHES} open batches`}), the OpenFGA sink`,
      '',
      `${WRITERS} writers commit one intent (one tuple) per transaction; as soon as the sink call that carried an intent returns,`,
      'its tuple is read back (a `read` of the exact key, as docs/design.md §7 proves a landing), again every 2 ms until found.',
      'A latency ends when the read that found the tuple returns (the targets are checked on this); the tuple became readable',
      "between that read's start and its return.",
      '',
      "| commits | offered → reached | commit → readable p50 / p95 / p99 / max (ms) | the same to the finding read's start | batches (mean size) | Write a batch, mean (ms) | finding read, mean (ms) | reads that came back empty |",
      '| --- | --- | --- | --- | --- | --- | --- | --- |',
      `| ${r.commits.toLocaleString('en-US')} in ${r.seconds.toFixed(1)} s | ${RATE}/s → ${Math.round(r.commits / r.seconds)}/s | ` +
        `${ms(p50)} / ${ms(percentile(r.latencies, 0.95))} / ${ms(p99)} / ${ms(r.latencies.at(-1) as number)} | ` +
        `${ms(percentile(r.toReadStart, 0.5))} / ${ms(percentile(r.toReadStart, 0.95))} / ${ms(percentile(r.toReadStart, 0.99))} / ${ms(r.toReadStart.at(-1) as number)} | ` +
        `${r.batches.toLocaleString('en-US')} (${(r.commits / Math.max(r.batches, 1)).toFixed(1)}) | ${ms(r.writeMs / Math.max(r.batches, 1))} | ${ms(r.readMs / Math.max(r.commits, 1))} | ${r.emptyReads} |`,
    ].join('\n'),
    targets: [
      {
        target: `commit → tuple readable in OpenFGA at ${RATE} commits/s, LISTEN: p50 ≤ 10 ms`,
        figure: `${ms(p50)} ms (${ms(percentile(r.toReadStart, 0.5))} ms to the finding read's start)`,
        met: p50 <= 10,
      },
      {
        target: `commit → tuple readable in OpenFGA at ${RATE} commits/s, LISTEN: p99 ≤ 40 ms`,
        figure: `${ms(p99)} ms (${ms(percentile(r.toReadStart, 0.99))} ms to the read's start)`,
        met: p99 <= 40,
      },
    ],
  };
}
