import { createOutboxTable, defineOutbox, type AnyKysely } from '@outbox/outbox';
import { sql } from 'kysely';
import { fill } from './bench-db.js';
import { orderedDrain } from './ordered-drain.js';
import { describeOrder, type OrderCheck } from './order-check.js';
import { pgBossDrain } from './pg-boss.js';
import { count, knob, median, times } from './statistics.js';
import { ratioTarget, type SectionResult } from './summary.js';

const CONCURRENCY = 10; // pg-boss's localConcurrency, and as many drainers
const BATCH = 100;

const LOOPS = ['drainer', 'key_strict_fifo', 'standard'] as const;
type Loop = (typeof LOOPS)[number];

/**
 * The ordered drainer against real pg-boss (the npm package, latest) on the same server in the same
 * run: the same keys and jobs (job i has key i % keys), localConcurrency 10 and 10 drainers, batch
 * 100, a consumer that does nothing. Trials interleaved, each starting with another loop. Knobs:
 * BENCH_PGBOSS_JOBS (100000), BENCH_PGBOSS_KEYS (1000), BENCH_PGBOSS_TRIALS (BENCH_TRIALS, else 3).
 */
export async function benchAgainstPgBoss(db: AnyKysely, url: string): Promise<SectionResult> {
  const jobs = knob('BENCH_PGBOSS_JOBS', 100_000);
  const keys = knob('BENCH_PGBOSS_KEYS', 1_000);
  const trials = knob('BENCH_PGBOSS_TRIALS', knob('BENCH_TRIALS', 3));
  const runs: Record<Loop, number[]> = { drainer: [], key_strict_fifo: [], standard: [] };
  const orders: Record<Loop, OrderCheck[]> = { drainer: [], key_strict_fifo: [], standard: [] };
  for (let trial = 1; trial <= trials; trial += 1) {
    const shift = (trial - 1) % LOOPS.length;
    for (const loop of [...LOOPS.slice(shift), ...LOOPS.slice(0, shift)]) {
      console.error(`[bench] drain: against pg-boss, trial ${trial}, ${loop}…`);
      if (loop === 'drainer') {
        const spec = defineOutbox({ table: `bench.against_pgboss_${trial}`, partitionColumn: 'resource_id' });
        await createOutboxTable(db, spec);
        await fill(db, spec, `'k' || (i % ${keys})`, jobs);
        const run = await orderedDrain({
          url,
          spec,
          rows: jobs,
          workers: CONCURRENCY,
          batchSize: BATCH,
          checkOrder: true,
        });
        runs.drainer.push(run.ms);
        orders.drainer.push(run.order as OrderCheck);
        await sql.raw(`drop table "${spec.schema}"."${spec.tableName}"`).execute(db);
      } else {
        const schema = `pgboss_${loop}_${trial}`;
        const run = await pgBossDrain({
          url,
          policy: loop,
          jobs,
          keys,
          concurrency: CONCURRENCY,
          batch: BATCH,
          schema,
        });
        runs[loop].push(run.ms);
        orders[loop].push(run.order);
        await sql.raw(`drop schema "${schema}" cascade`).execute(db);
      }
    }
  }
  const rate = (loop: Loop) => jobs / (median(runs[loop]) / 1000);
  const worst = (loop: Loop) => orders[loop].reduce((a, b) => (b.inversions > a.inversions ? b : a));
  const perTrial = (loop: Loop) => runs[loop].map((ms, i) => (ms / (runs.drainer[i] as number)).toFixed(1)).join(', ');
  const fifo = rate('drainer') / rate('key_strict_fifo');
  const standard = rate('drainer') / rate('standard');
  const row = (label: string, loop: Loop, versus: string) =>
    `| ${label} | ${count(rate(loop))} jobs/s | ${versus} | ${describeOrder(worst(loop), keys)} |`;
  const markdown = [
    `### Against pg-boss: ${count(jobs)} jobs over ${count(keys)} keys, ${CONCURRENCY} workers, batch ${BATCH}, median of ${trials} interleaved trials`,
    '',
    `pg-boss ${'`work()`'} with localConcurrency ${CONCURRENCY}, batchSize ${BATCH}, burstWhenBatchFull and the shortest poll (0.5 s),`,
    "maintenance off; its jobs inserted one insert per key-round (so each key's jobs have increasing created_on, as",
    'separate sends would) with ids that sort in creation order, then VACUUM ANALYZE, as the outbox tables get. The',
    `drainer: ${CONCURRENCY} drainers (default settings, batch ${BATCH}) over the same backlog. Order: per key, the order jobs were`,
    'completed (pg-boss: `completed_on`, ties broken by the order the handler saw them) or reached the sink (drainer),',
    'the worst trial.',
    '',
    '| consumer | throughput | drainer ÷ it, median (trial by trial) | per-key order |',
    '| --- | --- | --- | --- |',
    row(`@outbox/drainer (ordered)`, 'drainer', '—'),
    row('pg-boss `key_strict_fifo`', 'key_strict_fifo', `**${times(fifo, 1)}** (${perTrial('key_strict_fifo')})`),
    row('pg-boss `standard`', 'standard', `**${times(standard, 1)}** (${perTrial('standard')})`),
  ].join('\n');
  const inOrder = (loop: Loop) => worst(loop).keysOutOfOrder === 0;
  return {
    markdown,
    targets: [
      ratioTarget(
        `ordered drainer ÷ pg-boss \`key_strict_fifo\` ≥ 10× (${count(jobs)} jobs, ${count(keys)} keys)`,
        fifo,
        { atLeast: 10 },
        `trials ${perTrial('key_strict_fifo')}`,
      ),
      { target: 'ordered drainer ÷ pg-boss `standard` (which keeps no order)', figure: times(standard), met: null },
      {
        target: 'per-key order: drainer, and pg-boss `key_strict_fifo`, 0 keys out of order',
        figure: `drainer ${describeOrder(worst('drainer'), keys)}; key_strict_fifo ${describeOrder(worst('key_strict_fifo'), keys)}; standard ${describeOrder(worst('standard'), keys)}`,
        met: inOrder('drainer') && inOrder('key_strict_fifo'),
      },
    ],
  };
}
