import { DRAINER_DEFAULTS } from '@outbox/drainer';
import { createOutboxTable, defineOutbox } from '@outbox/outbox';
import {
  createDatabase,
  freePort,
  startHaproxy,
  startNativeOpenFga,
  startStack,
  type Haproxy,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { sql } from 'kysely';
import { fill, kysely } from './bench-db.js';
import { direct, landedOrder, payloadSql } from './end-to-end.js';
import { freshStore } from './openfga-store.js';
import { orderedDrain } from './ordered-drain.js';
import { describeOrder, type OrderCheck } from './order-check.js';
import { count, knob, median, times } from './statistics.js';
import type { SectionResult, TargetRow } from './summary.js';

/** Writes the direct ceiling keeps in flight across the two replicas: the sink's 4 per replica. */
const CEILING_IN_FLIGHT = 8;

/**
 * Issue 32 §4: end-to-end intents/s into two OpenFGA replicas (one postgres datastore, check cache
 * on) behind HAProxy, with 1, 2, 4, 8 and 12 drainers (defaults, each its own pool, as replicas)
 * on one backlog, each as a ratio to the direct pipelined ceiling of the same two replicas; order
 * read back from the store's changelog. The drainers run in this process, on one host: the hosts
 * of `pnpm topology` are not built yet. Knobs: BENCH_SCALING_INTENTS (10000),
 * BENCH_SCALING_PARTITIONS (1000), BENCH_SCALING_TRIALS (2), BENCH_SCALING_REPLICAS (1,2,4,8,12).
 */
export async function benchScaling(): Promise<SectionResult> {
  const intents = knob('BENCH_SCALING_INTENTS', 10_000);
  const partitions = knob('BENCH_SCALING_PARTITIONS', 1_000);
  const trials = knob('BENCH_SCALING_TRIALS', 2);
  const counts = (process.env.BENCH_SCALING_REPLICAS ?? '1,2,4,8,12').split(',').map(Number);
  const stack = await startStack({ openfgaDatastore: 'memory', fastPostgres: false });
  const datastoreUri = await createDatabase(stack.postgresUrl, 'openfga_replicas');
  const replicas: OpenFgaServer[] = [];
  const runs = new Map<number, number[]>([[0, []], ...counts.map((n) => [n, []] as [number, number[]])]);
  const orders: OrderCheck[] = [];
  let balancer: Haproxy | undefined;
  const url = await createDatabase(stack.postgresUrl, 'bench_scaling');
  const db = kysely(url);
  try {
    replicas.push(await startNativeOpenFga({ datastore: 'postgres', datastoreUri, checkCacheTtlMs: 10_000 }));
    replicas.push(await startNativeOpenFga({ datastore: 'postgres', datastoreUri, checkCacheTtlMs: 10_000 }));
    const port = await freePort();
    balancer = await startHaproxy([
      {
        name: 'openfga',
        mode: 'http',
        bind: { host: '127.0.0.1', port },
        servers: replicas.map((r) => ({ host: '127.0.0.1', port: r.httpPort })),
      },
    ]);
    const target = { apiUrl: `http://127.0.0.1:${port}`, token: undefined };
    for (let trial = 1; trial <= trials; trial += 1) {
      const order = trial % 2 === 1 ? [0, ...counts] : [...counts].reverse().concat(0);
      for (const workers of order) {
        console.error(`[bench] scaling: trial ${trial}, ${workers === 0 ? 'direct' : `${workers} drainer(s)`}…`);
        const tag = `s${trial}x${workers}`;
        const store = await freshStore(target);
        if (workers === 0) {
          runs.get(0)?.push(await direct(store.client, tag, intents, partitions, CEILING_IN_FLIGHT));
          continue;
        }
        const spec = defineOutbox({ table: `bench.scaling_${tag}`, partitionColumn: 'resource_id' });
        await createOutboxTable(db, spec);
        await fill(db, spec, `'vpc:${tag}-' || (i % ${partitions})`, intents, { payload: payloadSql(tag) });
        const run = await orderedDrain({
          url,
          spec,
          rows: intents,
          workers,
          batchSize: DRAINER_DEFAULTS.batchSize,
          sink: store.sink,
        });
        runs.get(workers)?.push(run.ms);
        orders.push(await landedOrder(store.client, tag));
        await sql.raw(`drop table "${spec.schema}"."${spec.tableName}"`).execute(db);
      }
    }
  } finally {
    await db.destroy();
    await balancer?.stop();
    for (const replica of replicas) await replica.stop();
    await stack.stop();
  }
  const rate = (n: number) => intents / (median(runs.get(n) ?? []) / 1000);
  const ceiling = rate(0);
  const outOfOrder = orders.reduce((sum, o) => sum + o.keysOutOfOrder, 0);
  const ratios = counts.map((n) => rate(n) / ceiling);
  const falls = counts.slice(1).filter((n, i) => rate(n) < 0.95 * rate(counts[i] as number));
  const targets: TargetRow[] = [
    {
      target: `scaling: drainers ${counts.join(', ')} into two OpenFGA replicas behind HAProxy, each count ≥ 0.95× the one before (the drain does not fall)`,
      figure: ratios.map((r, i) => `${counts[i]}: ${times(r)}`).join(', ') + ' of the ceiling',
      met: falls.length === 0,
    },
    {
      target: 'scaling: per-partition order in OpenFGA, 0 partitions out of order',
      figure: `${outOfOrder} over ${orders.length} runs`,
      met: outOfOrder === 0,
    },
  ];
  return {
    markdown: [
      `### Scaling: drainers into two OpenFGA replicas behind HAProxy, ${count(intents)} intents over ${count(partitions)} partitions, median of ${trials} trials`,
      '',
      "Two OpenFGA replicas on one postgres datastore (the outbox's Postgres), check cache on, behind HAProxy (round",
      `robin); the ceiling is direct SDK Writes of 100 tuples, ${CEILING_IN_FLIGHT} in flight, through the same HAProxy. Each drainer has`,
      'its own pool, as a replica would; all run in this process, on one host.',
      '',
      '| drainers | intents/s | ÷ ceiling | trials (ms) |',
      '| --- | ---: | --- | --- |',
      `| direct: the ceiling | ${count(ceiling)} | 1.00× | ${(runs.get(0) ?? []).map(count).join(', ')} |`,
      ...counts.map(
        (n, i) =>
          `| ${n} | ${count(rate(n))} | ${times(ratios[i] as number)} | ${(runs.get(n) ?? []).map(count).join(', ')} |`,
      ),
      '',
      `Order: ${
        orders.length > 0
          ? describeOrder(
              orders.reduce((a, b) => (b.inversions > a.inversions ? b : a)),
              partitions,
              'partitions',
            )
          : '—'
      } (the worst run).`,
    ].join('\n'),
    targets,
  };
}
