import { PgBoss } from 'pg-boss';
import pg from 'pg';
import { checkOrder, type OrderCheck } from './order-check.js';

/** A pg-boss drain to compare with the ordered drainer: the same keys, jobs, batch and concurrency. */
export interface PgBossDrainOptions {
  /** Postgres database to install pg-boss in (its own schema per run). */
  readonly url: string;
  /** `key_strict_fifo` (FIFO per `singletonKey`) or `standard` (no order). */
  readonly policy: 'key_strict_fifo' | 'standard';
  readonly jobs: number;
  readonly keys: number;
  /** `work()`'s `localConcurrency`. */
  readonly concurrency: number;
  /** `work()`'s `batchSize`. */
  readonly batch: number;
  /** Schema name, fresh per run (pg-boss creates it). */
  readonly schema: string;
}

export interface PgBossDrainRun {
  /** From `work()` to the last batch completed. */
  readonly ms: number;
  readonly order: OrderCheck;
  /** Batches the handlers got (jobs ÷ batches is the mean batch: a short one is a fetch that found too few free keys). */
  readonly batches: number;
}

/** One statement on a connection of its own (pg-boss keeps its pool to itself). */
async function query<Row extends object = object>(url: string, text: string): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Row>(text)).rows;
  } finally {
    await client.end();
  }
}

/**
 * A sequential uuid for job `i`: pg-boss breaks ties of `created_on` by id inside a key, so the
 * ids of one key sort in creation order as they would with separate sends.
 */
const jobId = (i: number) => `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;

/**
 * Fills a pg-boss queue with `jobs` jobs over `keys` keys (job i has key `k{i % keys}`), one
 * insert per `keys` jobs, so that every key's jobs come from distinct inserts (pg-boss orders a
 * key by `created_on`, one per transaction), then drains it with `work()` at `concurrency` ×
 * `batch` and a handler that does nothing. The order is read from the jobs' `completed_on`, ties
 * (one completion statement) broken by the order the handler saw them in.
 */
export async function pgBossDrain(options: PgBossDrainOptions): Promise<PgBossDrainRun> {
  const { url, policy, jobs, keys, concurrency, batch, schema } = options;
  // Maintenance and cron off: the run measures fetch and complete, not pg-boss's housekeeping.
  const boss = new PgBoss({ connectionString: url, schema, max: concurrency + 2, supervise: false, schedule: false });
  const errors: unknown[] = [];
  boss.on('error', (error) => errors.push(error));
  await boss.start();
  const name = `bench_${policy}`;
  try {
    await boss.createQueue(name, { policy, retryLimit: 0, deleteAfterSeconds: 0 });
    for (let from = 0; from < jobs; from += keys) {
      const chunk = Array.from({ length: Math.min(keys, jobs - from) }, (_, j) => {
        const i = from + j;
        const key = `k${i % keys}`;
        return { id: jobId(i), data: { key, rank: i }, ...(policy === 'key_strict_fifo' ? { singletonKey: key } : {}) };
      });
      await boss.insert(name, chunk);
    }
    // As the outbox tables are before their drains: a fresh table without statistics gets plans
    // that run key_strict_fifo's fetch at a few hundred jobs/s (measured).
    await query(url, `vacuum analyze "${schema}".job`);
    const seen = new Map<string, number>();
    let handled = 0;
    let batches = 0;
    let resolveDone: () => void = () => undefined;
    const done = new Promise<void>((resolve) => (resolveDone = resolve));
    const started = performance.now();
    await boss.work<{ key: string; rank: number }>(
      name,
      // A full batch fetches again at once; a short one waits the shortest poll pg-boss allows.
      { localConcurrency: concurrency, batchSize: batch, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 },
      async (batchJobs) => {
        batches += 1;
        for (const job of batchJobs) seen.set(job.id, seen.size);
        handled += batchJobs.length;
        if (handled >= jobs) resolveDone();
      },
    );
    await done;
    await boss.offWork(name, { wait: true }); // the last batches' completions
    const ms = performance.now() - started;
    if (errors.length > 0) throw new Error(`pg-boss reported ${errors.length} errors`, { cause: errors[0] });
    const rows = await query<{ id: string; key: string; rank: number; completion: number }>(
      url,
      `select id::text as id, data->>'key' as key, (data->>'rank')::int as rank,
         dense_rank() over (order by completed_on)::int as completion
       from "${schema}".job where name = '${name}' and state = 'completed'`,
    );
    if (rows.length !== jobs) throw new Error(`pg-boss ${policy}: ${rows.length} of ${jobs} jobs completed`);
    // Jobs completed by one statement share completed_on: among them, the order the handler saw.
    const completed = rows.sort((a, b) => a.completion - b.completion || (seen.get(a.id) ?? 0) - (seen.get(b.id) ?? 0));
    return { ms, order: checkOrder(completed), batches };
  } finally {
    await boss.stop({ graceful: false, close: true });
  }
}
