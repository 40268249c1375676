import {
  createOutboxTable,
  defineOutbox,
  dropOutboxTable,
  enqueue,
  enqueueMany,
  type AnyKysely,
  type EnqueueInput,
  type OutboxSpec,
} from '@outbox/outbox';
import { createDatabase, startStack } from '@outbox/test-stack';
import { kysely } from './bench-db.js';
import { count, knob, median, times } from './statistics.js';
import { ratioTarget, type SectionResult } from './summary.js';

const WRITERS = 8;
const PARTITIONS = 1_000;
const BATCH = 100;

type Loop = 'insert' | 'enqueue' | 'enqueue+btree';
const LOOPS: readonly Loop[] = ['insert', 'enqueue', 'enqueue+btree'];

/** How much longer a row takes at `withIndex` rows/s than at `without`, in percent. */
const cost = (without: number, withIndex: number) => `${(100 * (without / withIndex - 1)).toFixed(1)} %`;

const intentOf = (i: number): EnqueueInput => {
  const partitionKey = `vpc:${i % PARTITIONS}`;
  return { partitionKey, payload: { writes: [{ user: 'project:p', relation: 'project', object: partitionKey }] } };
};

/** One transaction writing `intents`: through enqueue / enqueueMany, or as the plain multi-row INSERT of the same rows. */
async function write(db: AnyKysely, spec: OutboxSpec, loop: Loop, intents: readonly EnqueueInput[]): Promise<void> {
  await db.transaction().execute(async (trx) => {
    if (loop === 'insert') {
      await trx
        .insertInto(spec.table)
        .values(
          intents.map((intent) => ({
            [spec.partitionColumn]: intent.partitionKey,
            payload: JSON.stringify(intent.payload),
          })),
        )
        .execute();
    } else if (intents.length === 1) {
      await enqueue(trx, spec, intents[0] as EnqueueInput);
    } else {
      await enqueueMany(trx, spec, intents);
    }
  });
}

/** `WRITERS` writers commit `rows` rows in transactions of `perTransaction`; returns rows/s. */
async function measure(
  db: AnyKysely,
  spec: OutboxSpec,
  loop: Loop,
  rows: number,
  perTransaction: number,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      while (next < rows) {
        const from = next;
        next += perTransaction;
        await write(
          db,
          spec,
          loop,
          Array.from({ length: perTransaction }, (_, j) => intentOf(from + j)),
        );
      }
    }),
  );
  return rows / ((performance.now() - started) / 1000);
}

/**
 * What enqueue costs a writer (issue 23): `enqueue` inside a transaction against a plain INSERT of
 * the same row into the same outbox table (so the indexes and the NOTIFY trigger are the same; what
 * differs is enqueue's validation, advisory lock and head flag), one row per transaction and 100 per
 * transaction (`enqueueMany`); and the same with the optional `(partition, id)` btree. 8 writers,
 * stock Postgres, a fresh table per loop, interleaved trials. Knobs: BENCH_ENQUEUE_TRIALS (3),
 * BENCH_ENQUEUE_SINGLE (rows, 4000), BENCH_ENQUEUE_BATCHED (rows, 40000).
 */
export async function benchEnqueue(): Promise<SectionResult> {
  const trials = knob('BENCH_ENQUEUE_TRIALS', 3);
  const shapes = [
    { name: 'one row per transaction (`enqueue`)', rows: knob('BENCH_ENQUEUE_SINGLE', 4_000), perTransaction: 1 },
    {
      name: `${BATCH} rows per transaction (\`enqueueMany\`)`,
      rows: knob('BENCH_ENQUEUE_BATCHED', 40_000),
      perTransaction: BATCH,
    },
  ];
  const stack = await startStack({ fastPostgres: false });
  const results: Array<{ name: string; rates: Record<Loop, number[]> }> = [];
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_enqueue');
    db = kysely(url, WRITERS);
    let n = 0;
    for (const shape of shapes) {
      const rates: Record<Loop, number[]> = { insert: [], enqueue: [], 'enqueue+btree': [] };
      for (let trial = 1; trial <= trials; trial += 1) {
        const shift = (trial - 1) % LOOPS.length;
        for (const loop of [...LOOPS.slice(shift), ...LOOPS.slice(0, shift)]) {
          console.error(`[bench] enqueue: ${shape.perTransaction} a transaction, trial ${trial}, ${loop}…`);
          n += 1;
          const spec = defineOutbox({ table: `bench.enqueue_${n}`, partitionColumn: 'resource_id' });
          await createOutboxTable(db, spec, { partitionIndex: loop === 'enqueue+btree' });
          rates[loop].push(await measure(db, spec, loop, shape.rows, shape.perTransaction));
          await dropOutboxTable(db, spec);
        }
      }
      results.push({ name: shape.name, rates });
    }
  } finally {
    await db?.destroy();
    await stack.stop();
  }
  const row = ({ name, rates }: (typeof results)[number]) => {
    const m = (loop: Loop) => median(rates[loop]);
    const perTrial = rates.enqueue.map((r, i) => (r / (rates.insert[i] as number)).toFixed(2)).join(', ');
    const perTrialCost = rates.enqueue.map((r, i) => cost(r, rates['enqueue+btree'][i] as number)).join(', ');
    return (
      `| ${name} | ${count(m('insert'))} | ${count(m('enqueue'))} | ${count(m('enqueue+btree'))} | ` +
      `**${times(m('enqueue') / m('insert'))}** (${perTrial}) | **${cost(m('enqueue'), m('enqueue+btree'))}** (${perTrialCost}) |`
    );
  };
  return {
    markdown: [
      `### Enqueue cost: ${WRITERS} writers, ${PARTITIONS.toLocaleString('en-US')} partitions, median of ${trials} interleaved trials (rows/s)`,
      '',
      'A plain INSERT of the same rows into the same outbox table (same indexes, same NOTIFY trigger) against `enqueue` /',
      "`enqueueMany` (validation, the partitions' advisory locks, the head flag), each in its own transaction; and enqueue",
      'into a table with the optional plain `(partition, id)` btree (`createOutboxTable(db, spec, { partitionIndex: true })`).',
      "The btree's cost: how much longer each row takes with it (time per row with ÷ without, minus one).",
      '',
      "| rows per transaction | plain INSERT | enqueue | enqueue, with the btree | enqueue ÷ INSERT (trial by trial) | the btree's cost (trial by trial) |",
      '| --- | ---: | ---: | ---: | --- | --- |',
      ...results.map(row),
    ].join('\n'),
    targets: results.flatMap(({ name, rates }) => {
      const m = (loop: Loop) => median(rates[loop]);
      return [
        ratioTarget(`enqueue ≥ 0.7× a plain INSERT of the same row, ${name}`, m('enqueue') / m('insert'), {
          atLeast: 0.7,
        }),
        {
          target: `the optional \`(partition, id)\` btree costs enqueue ≤ 5 %, ${name}`,
          figure: cost(m('enqueue'), m('enqueue+btree')),
          met: m('enqueue') / m('enqueue+btree') - 1 <= 0.05,
        },
      ];
    }),
  };
}
