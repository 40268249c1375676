import { ConsistencyPreference, OpenFgaClient } from '@openfga/sdk';
import { authorizationModel } from '@outbox/migrations';
import { awaitDelivered, createOutboxTable, defineOutbox, enqueue, outboxToken, type AnyKysely } from '@outbox/outbox';
import { createDatabase, createOpenFgaStore, startNativeOpenFga, startStack } from '@outbox/test-stack';
import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { DeliveredTokens, requestConsistency } from '../services/kit/src/read-consistency.js';
import { kysely } from './bench-db.js';
import type { MemoryDrainerConfig, MemoryDrainerMessage } from './memory-drainer.js';
import { freshStore } from './openfga-store.js';
import { paceWriters } from './paced-writers.js';
import { count, knob, ms, percentile, sorted, times } from './statistics.js';
import type { SectionResult, TargetRow } from './summary.js';

const WRITERS = 16;
const CACHE_TTL_MS = 10_000;

/** The drainer of `pnpm bench memory`, in a process of its own: this one has no drainer. */
async function drainerProcess(config: MemoryDrainerConfig): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', resolve(import.meta.dirname, 'memory-drainer.ts'), JSON.stringify(config)],
    {
      cwd: resolve(import.meta.dirname, '..'),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  await new Promise<void>((ready, fail) => {
    const timer = setTimeout(() => fail(new Error('tokens: the drainer process did not start within 60 s')), 60_000);
    child.on('message', (message: MemoryDrainerMessage) => {
      if (message.type !== 'ready') return;
      clearTimeout(timer);
      ready();
    });
    child.once('exit', (code) => fail(new Error(`tokens: the drainer process exited (${code})`)));
  });
  return child;
}

async function stopDrainer(child: ChildProcess): Promise<void> {
  const stopped = new Promise<void>((done) => child.once('exit', () => done()));
  child.send({ type: 'stop' });
  await stopped;
}

/** Commit → `awaitDelivered` resolving, here, while the drainer delivers in its own process. */
async function awaitFromAnotherProcess(db: AnyKysely, url: string, apiUrl: string, token: string | undefined) {
  const seconds = knob('BENCH_TOKENS_SECONDS', 10);
  const rate = knob('BENCH_TOKENS_RATE', 200);
  const spec = defineOutbox({ table: 'bench.tokens', partitionColumn: 'resource_id' });
  await createOutboxTable(db, spec);
  const store = await freshStore({ apiUrl, token });
  const child = await drainerProcess({ databaseUrl: url, table: spec.table, apiUrl, storeId: store.storeId, token });
  const latencies: number[] = [];
  let undelivered = 0;
  let tokenChars = 0;
  try {
    const written = await paceWriters({
      writers: WRITERS,
      rate,
      seconds,
      async write(i) {
        const object = `vpc:t${i}`;
        const minted = await db.transaction().execute(async (trx) => {
          const id = await enqueue(trx, spec, {
            partitionKey: object,
            payload: { writes: [{ user: 'project:bench', relation: 'project', object }] },
          });
          return outboxToken(trx, spec, [id]);
        });
        const committed = performance.now();
        const result = await awaitDelivered(db, minted, { timeoutMs: 10_000 });
        latencies.push(performance.now() - committed);
        tokenChars = minted.length;
        if (!result.delivered) undelivered += 1;
      },
    });
    return { latencies: sorted(latencies), undelivered, written, rate, tokenChars };
  } finally {
    await stopDrainer(child);
  }
}

/** A check's cost without a token, with one older than the TTL that was seen before, and with one seen first. */
async function readCost(db: AnyKysely) {
  const reads = knob('BENCH_TOKENS_READS', 1_000);
  const server = await startNativeOpenFga({ datastore: 'memory', checkCacheTtlMs: CACHE_TTL_MS });
  try {
    const ids = await createOpenFgaStore(server.apiUrl, { authorizationModel: authorizationModel() });
    const client = new OpenFgaClient({ apiUrl: server.apiUrl, ...ids, retryParams: { maxRetry: 0 } });
    await client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:p' }] });
    const spec = defineOutbox({ table: 'bench.tokens', partitionColumn: 'resource_id' });
    // Tokens of deliveries older than the TTL: the reads they allow may use the cache.
    const rows = await sql<{ id: string }>`
      update bench.tokens set sent_at = now() - interval '1 minute' where id in (select id from bench.tokens order by id limit ${reads}) returning id::text as id`.execute(
      db,
    );
    const old = await Promise.all(rows.rows.map((r) => outboxToken(db, spec, [r.id])));
    const options = { db, outbox: spec, timeoutMs: 1_000, checkCacheTtlMs: CACHE_TTL_MS };
    const remembered = new DeliveredTokens();
    const check = (consistency: 'higher' | 'minimize') =>
      client.check(
        { user: 'user:alice', relation: 'can_view', object: 'project:p' },
        {
          consistency:
            consistency === 'higher' ? ConsistencyPreference.HigherConsistency : ConsistencyPreference.MinimizeLatency,
        },
      );
    const read = async (header: string | undefined, delivered?: DeliveredTokens) => {
      const started = performance.now();
      const { consistency } = await requestConsistency(header, delivered ? { ...options, delivered } : options);
      await check(consistency);
      return performance.now() - started;
    };
    const shared = `at-least-as-fresh ${old[0]}`;
    await read(shared, remembered); // the first sight of the token: remembered from now on
    for (let i = 0; i < 200; i += 1) await read(undefined); // warm: JIT, the cache entry, the pool
    const without: number[] = [];
    const again: number[] = [];
    const first: number[] = [];
    // Interleaved, so that drift in the machine's load falls on all three alike.
    for (let i = 0; i < old.length; i += 1) {
      without.push(await read(undefined));
      again.push(await read(shared, remembered));
      first.push(await read(`at-least-as-fresh ${old[i]}`));
    }
    return { without: sorted(without), again: sorted(again), first: sorted(first) };
  } finally {
    await server.stop();
  }
}

/**
 * Consistency tokens (issue 31): `awaitDelivered` from a process with no drainer while a drainer
 * process delivers BENCH_TOKENS_RATE (200) writes/s for BENCH_TOKENS_SECONDS (10), one intent a
 * transaction, into OpenFGA on the postgres datastore; and what a token older than the check cache's
 * TTL adds to a read (the kit's `requestConsistency`, then a check) against OpenFGA with its check
 * cache on: BENCH_TOKENS_READS (1,000) reads each, interleaved.
 */
export async function benchTokens(): Promise<SectionResult> {
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_tokens');
    db = kysely(url, WRITERS);
    const waits = await awaitFromAnotherProcess(db, url, stack.openfga.apiUrl, stack.openfga.presharedKey);
    const reads = await readCost(db);
    return report(waits, reads);
  } finally {
    await db?.destroy();
    await stack.stop();
  }
}

function report(
  waits: Awaited<ReturnType<typeof awaitFromAnotherProcess>>,
  reads: Awaited<ReturnType<typeof readCost>>,
): SectionResult {
  const p = percentile;
  const w50 = p(waits.latencies, 0.5);
  const w99 = p(waits.latencies, 0.99);
  const againRatio = p(reads.again, 0.5) / p(reads.without, 0.5);
  const firstRatio = p(reads.first, 0.5) / p(reads.without, 0.5);
  const targets: TargetRow[] = [
    {
      target: `awaitDelivered from another process, ${waits.rate} writes/s: p50 ≤ 10 ms from commit`,
      figure: `${ms(w50)} ms`,
      met: w50 <= 10 && waits.undelivered === 0,
    },
    {
      target: `awaitDelivered from another process, ${waits.rate} writes/s: p99 ≤ 40 ms from commit`,
      figure: `${ms(w99)} ms`,
      met: w99 <= 40 && waits.undelivered === 0,
    },
    {
      target: 'a read with a token older than the TTL ÷ a read without one, p50 ≤ 1.0× (the token seen before)',
      figure: times(againRatio),
      met: againRatio <= 1.0,
    },
    {
      target: 'a read with a token older than the TTL, seen first (two queries) ÷ a read without one, p50',
      figure: times(firstRatio),
      met: null,
    },
  ];
  const row = (name: string, values: readonly number[]) =>
    `| ${name} | ${ms(p(values, 0.5))} | ${ms(p(values, 0.99))} | ${ms(values.at(-1) as number)} |`;
  return {
    markdown: [
      `### Consistency tokens: awaitDelivered from another process at ${waits.rate} writes/s, and what a token adds to a read`,
      '',
      `${count(waits.written.written)} writes in ${waits.written.seconds.toFixed(1)} s by ${WRITERS} writers, one intent a transaction and its`,
      `token minted in it (${waits.tokenChars} characters); a drainer (defaults, LISTEN, the OpenFGA sink, postgres datastore)`,
      'in a process of its own; each writer then waits with `awaitDelivered` in this process, which has no drainer.',
      `From commit to resolved: p50 / p99 / max ${ms(w50)} / ${ms(w99)} / ${ms(waits.latencies.at(-1) as number)} ms;`,
      `${waits.undelivered} not delivered within the 10 s timeout.`,
      '',
      `Reads against OpenFGA with its check cache on (TTL ${CACHE_TTL_MS / 1000} s, memory datastore), ${count(reads.without.length)} of each, interleaved:`,
      "the kit's `requestConsistency`, then a `check` at the consistency it chose (ms):",
      '',
      '| read | p50 | p99 | max |',
      '| --- | --- | --- | --- |',
      row('no token (MINIMIZE_LATENCY)', reads.without),
      row('a token older than the TTL, seen before (answered from memory)', reads.again),
      row('a token older than the TTL, seen first (two queries: its tables, its rows)', reads.first),
    ].join('\n'),
    targets,
  };
}
