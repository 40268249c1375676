import { createOutboxTable, defineOutbox, type AnyKysely, type OutboxSpec } from '@outbox/outbox';
import { sql } from 'kysely';
import { claimBatch } from '../packages/drainer/src/claim.js';
import { fill } from './bench-db.js';
import { orderedDrain } from './ordered-drain.js';
import { count, knob, median } from './statistics.js';
import { ratioTarget, type SectionResult } from './summary.js';

const BATCH = 100;

/**
 * Median time of a claim of `BATCH` (rolled back) on each of `specs`, taken in turns — one claim
 * on each table, then again — so that a drift of the machine during the measurement falls on
 * every table alike.
 */
async function claimMs(db: AnyKysely, specs: readonly OutboxSpec[], rounds = 200): Promise<number[]> {
  const taken = specs.map((): number[] => []);
  for (let i = 0; i < rounds; i += 1) {
    for (const [n, spec] of specs.entries()) {
      await db
        .transaction()
        .execute(async (trx) => {
          const started = performance.now();
          await claimBatch(trx, spec, BATCH);
          taken[n]?.push(performance.now() - started);
          throw new Error('rollback');
        })
        .catch(() => undefined);
    }
  }
  return taken.map(median);
}

/**
 * Claim cost against delivered rows: 1,000 pending keys of 10 rows, beside 0 and beside
 * BENCH_CLAIM_DELIVERED (default 2,000,000; the target is 10M) delivered rows; then what
 * un-vacuumed delivered heads cost (100k single-row keys drained, claims before and after VACUUM).
 */
export async function benchClaimCost(db: AnyKysely, url: string): Promise<SectionResult> {
  const deliveredRows = knob('BENCH_CLAIM_DELIVERED', 2_000_000);
  const empty = defineOutbox({ table: 'bench.claim_empty', partitionColumn: 'resource_id' });
  const full = defineOutbox({ table: 'bench.claim_full', partitionColumn: 'resource_id' });
  await createOutboxTable(db, empty);
  await createOutboxTable(db, full);
  console.error(`[bench] drain: claim cost, filling ${count(deliveredRows)} delivered rows…`);
  await fill(db, full, `'d' || i`, deliveredRows, { delivered: true });
  await fill(db, empty, `'k' || (i % 1000)`, 10_000);
  await fill(db, full, `'k' || (i % 1000)`, 10_000);
  const size = await sql<{
    mb: string;
  }>`select (pg_total_relation_size(${'bench.claim_full'}::regclass) / 1000000)::text as mb`.execute(db);
  const [emptyMs = NaN, fullMs = NaN] = await claimMs(db, [empty, full]);

  const churn = defineOutbox({ table: 'bench.claim_churn', partitionColumn: 'resource_id' });
  await createOutboxTable(db, churn);
  await sql.raw(`alter table "bench"."claim_churn" set (autovacuum_enabled = false)`).execute(db);
  await fill(db, churn, `'c' || i`, 100_000);
  await orderedDrain({ url, spec: churn, rows: 100_000, workers: 2, batchSize: BATCH });
  await fill(db, churn, `'k' || (i % 1000)`, 10_000);
  await sql.raw(`analyze "bench"."claim_churn"`).execute(db);
  const [dirtyMs = NaN] = await claimMs(db, [churn], 50);
  await sql.raw(`vacuum "bench"."claim_churn"`).execute(db);
  const [cleanMs = NaN] = await claimMs(db, [churn], 50);
  for (const table of ['claim_empty', 'claim_full', 'claim_churn'])
    await sql.raw(`drop table "bench"."${table}"`).execute(db);

  const ratio = fullMs / emptyMs;
  return {
    markdown: [
      `### Claim cost (median of 200 claims of ${BATCH} on each table, the tables in turns, rolled back; 1,000 pending keys of 10 rows)`,
      '',
      '| table | claim |',
      '| --- | --- |',
      `| no delivered rows | ${emptyMs.toFixed(2)} ms |`,
      `| ${count(deliveredRows)} delivered rows (vacuumed; ${size.rows[0]?.mb} MB with indexes) | ${fullMs.toFixed(2)} ms (${ratio.toFixed(2)}× empty) |`,
      `| 100k heads just delivered, not vacuumed | ${dirtyMs.toFixed(2)} ms |`,
      `| the same after VACUUM | ${cleanMs.toFixed(2)} ms |`,
    ].join('\n'),
    targets: [
      ratioTarget(
        `claim beside ${count(deliveredRows)} delivered rows ≤ 1.2× an empty table (the issue's size: 10M)`,
        ratio,
        { atMost: 1.2 },
        `${fullMs.toFixed(2)} vs ${emptyMs.toFixed(2)} ms`,
      ),
    ],
  };
}
