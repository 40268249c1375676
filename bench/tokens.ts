import { ConsistencyPreference, OpenFgaClient } from '@openfga/sdk';
import { authorizationModel } from '@outbox/migrations';
import { awaitDelivered, createOutboxTable, defineOutbox, outboxToken, type AnyKysely } from '@outbox/outbox';
import { createDatabase, createOpenFgaStore, startNativeOpenFga, startStack } from '@outbox/test-stack';
import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { DeliveredTokens, requestConsistency } from '../services/kit/src/read-consistency.js';
import { kysely } from './bench-db.js';
import { freshStore } from './openfga-store.js';
import type { TokenWriterCommand, TokenWriterConfig, TokenWriterMessage } from './token-writer.js';
import { paceWriters } from './paced-writers.js';
import { count, knob, ms, percentile, sorted, times } from './statistics.js';
import type { SectionResult, TargetRow } from './summary.js';

const WRITERS = 16;
const CACHE_TTL_MS = 10_000;

/** The writing service, in a process of its own: this one only waits on the tokens it answers with. */
async function writerProcess(config: TokenWriterConfig): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', resolve(import.meta.dirname, 'token-writer.ts'), JSON.stringify(config)],
    { cwd: resolve(import.meta.dirname, '..'), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  await new Promise<void>((ready, fail) => {
    const timer = setTimeout(() => fail(new Error('tokens: the writer process did not start within 60 s')), 60_000);
    child.on('message', (message: TokenWriterMessage) => {
      if (message.type !== 'ready') return;
      clearTimeout(timer);
      ready();
    });
    child.once('exit', (code) => fail(new Error(`tokens: the writer process exited (${code})`)));
  });
  return child;
}

async function stopWriter(child: ChildProcess): Promise<void> {
  const stopped = new Promise<void>((done) => child.once('exit', () => done()));
  child.send({ type: 'stop' } satisfies TokenWriterCommand);
  await stopped;
}

/** Waits (a figure) and the drainer's own lag, for one run of the writer. */
interface WaitRun {
  readonly writeThrough: boolean;
  readonly latencies: readonly number[];
  readonly undelivered: number;
  readonly written: { written: number; seconds: number };
  readonly tokenChars: number;
  /** `sent_at - created_at` on the database's clock, ms. */
  readonly deliveryLag: { p50: number; p99: number };
}

/**
 * Commit → `awaitDelivered` resolving, here, for writes a writer process commits (each answered
 * with its token at once) and delivers itself (`writeThrough`) or leaves to its drainer.
 */
async function awaitFromAnotherProcess(
  db: AnyKysely,
  url: string,
  target: { apiUrl: string; token: string | undefined },
  writeThrough: boolean,
): Promise<WaitRun> {
  const seconds = knob('BENCH_TOKENS_SECONDS', 10);
  const rate = knob('BENCH_TOKENS_RATE', 200);
  const table = `bench.tokens_${writeThrough ? 'through' : 'drainer'}`;
  const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
  await createOutboxTable(db, spec);
  const store = await freshStore(target);
  const child = await writerProcess({ databaseUrl: url, table, storeId: store.storeId, ...target, writeThrough });
  const answers = new Map<number, (message: Extract<TokenWriterMessage, { type: 'written' }>) => void>();
  child.on('message', (message: TokenWriterMessage) => {
    if (message.type === 'written') answers.get(message.i)?.(message);
  });
  const latencies: number[] = [];
  let undelivered = 0;
  let tokenChars = 0;
  try {
    const written = await paceWriters({
      writers: WRITERS,
      rate,
      seconds,
      async write(i) {
        const answer = new Promise<Extract<TokenWriterMessage, { type: 'written' }>>((done) => answers.set(i, done));
        child.send({ type: 'write', i } satisfies TokenWriterCommand);
        const { token, committedAt } = await answer;
        answers.delete(i);
        const result = await awaitDelivered(db, token, { timeoutMs: 10_000 });
        latencies.push(performance.timeOrigin + performance.now() - committedAt);
        tokenChars = token.length;
        if (!result.delivered) undelivered += 1;
      },
    });
    // sent_at is the delivering transaction's start, just before its claim: the delivery's own lag.
    const lag = await sql<{ p50: number; p99: number }>`
      select percentile_cont(0.5) within group (order by ms) as p50, percentile_cont(0.99) within group (order by ms) as p99
      from (select extract(epoch from sent_at - created_at) * 1000 as ms from ${sql.table(table)} where sent_at is not null) d`.execute(
      db,
    );
    const deliveryLag = lag.rows[0] as { p50: number; p99: number };
    return { writeThrough, latencies: sorted(latencies), undelivered, written, tokenChars, deliveryLag };
  } finally {
    await stopWriter(child);
  }
}

/** A check's cost without a token, with one older than the TTL that was seen before, and with one seen first. */
async function readCost(db: AnyKysely, written: WaitRun) {
  const reads = knob('BENCH_TOKENS_READS', 1_000);
  const server = await startNativeOpenFga({ datastore: 'memory', checkCacheTtlMs: CACHE_TTL_MS });
  try {
    const ids = await createOpenFgaStore(server.apiUrl, { authorizationModel: authorizationModel() });
    const client = new OpenFgaClient({ apiUrl: server.apiUrl, ...ids, retryParams: { maxRetry: 0 } });
    await client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:p' }] });
    const table = `bench.tokens_${written.writeThrough ? 'through' : 'drainer'}`;
    const spec = defineOutbox({ table, partitionColumn: 'resource_id' });
    // Tokens of deliveries older than the TTL: the reads they allow may use the cache.
    const rows = await sql<{ id: string }>`
      update ${sql.table(table)} set sent_at = now() - interval '1 minute' where id in (select id from ${sql.table(table)} order by id limit ${reads}) returning id::text as id`.execute(
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
 * Consistency tokens (issue 31): `awaitDelivered` here, in a process with no drainer, on the tokens
 * a writer process answers with, BENCH_TOKENS_RATE (200) writes/s for BENCH_TOKENS_SECONDS (10),
 * the writer delivering its own writes (write-through) and then leaving them to its drainer; and
 * what a token older than the check cache's TTL adds to a read (the kit's `requestConsistency`,
 * then a check) against OpenFGA with its check cache on: BENCH_TOKENS_READS (1,000) reads each.
 */
export async function benchTokens(): Promise<SectionResult> {
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_tokens');
    db = kysely(url, WRITERS);
    const target = { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey };
    const waits = [
      await awaitFromAnotherProcess(db, url, target, true),
      await awaitFromAnotherProcess(db, url, target, false),
    ];
    const reads = await readCost(db, waits[0] as WaitRun);
    return report(waits, reads);
  } finally {
    await db?.destroy();
    await stack.stop();
  }
}

function report(waits: readonly WaitRun[], reads: Awaited<ReturnType<typeof readCost>>): SectionResult {
  const p = percentile;
  const rate = knob('BENCH_TOKENS_RATE', 200);
  const through = waits[0] as WaitRun;
  const w50 = p(through.latencies, 0.5);
  const w99 = p(through.latencies, 0.99);
  const againRatio = p(reads.again, 0.5) / p(reads.without, 0.5);
  const firstRatio = p(reads.first, 0.5) / p(reads.without, 0.5);
  const targets: TargetRow[] = [
    {
      target: `awaitDelivered from another process, ${rate} writes/s (written through): p50 ≤ 10 ms from commit`,
      figure: `${ms(w50)} ms`,
      met: w50 <= 10 && through.undelivered === 0,
    },
    {
      target: `awaitDelivered from another process, ${rate} writes/s (written through): p99 ≤ 40 ms from commit`,
      figure: `${ms(w99)} ms`,
      met: w99 <= 40 && through.undelivered === 0,
    },
    {
      target: 'a read with a token older than the TTL ÷ a read without one, p50 ≤ 1.0× (the token seen before)',
      figure: times(againRatio),
      met: againRatio <= 1.0,
    },
    {
      target: 'a read with a token older than the TTL, seen first (one query) ÷ a read without one, p50',
      figure: times(firstRatio),
      met: null,
    },
  ];
  const row = (name: string, values: readonly number[]) =>
    `| ${name} | ${ms(p(values, 0.5))} | ${ms(p(values, 0.99))} | ${ms(values.at(-1) as number)} |`;
  const waitRow = (run: WaitRun) =>
    `| ${run.writeThrough ? 'written through, its drainer for the rest' : 'its drainer only (LISTEN)'} | ` +
    `${count(run.written.written)} in ${run.written.seconds.toFixed(1)} s | ${ms(p(run.latencies, 0.5))} / ${ms(p(run.latencies, 0.99))} / ` +
    `${ms(run.latencies.at(-1) as number)} | ${ms(run.deliveryLag.p50)} / ${ms(run.deliveryLag.p99)} | ${run.undelivered} |`;
  return {
    markdown: [
      `### Consistency tokens: awaitDelivered from another process at ${rate} writes/s, and what a token adds to a read`,
      '',
      `A writer process (a service: its drainer with defaults, LISTEN, the OpenFGA sink into the postgres datastore)`,
      `commits one intent a transaction with its token (${through.tokenChars} characters) and answers with the token at`,
      `once; this process, which has no drainer, waits on each with \`awaitDelivered\` (${WRITERS} waiting side by side).`,
      "From the commit to the wait resolved (ms), and the delivery's own part, `sent_at - created_at` on the database's clock:",
      '',
      '| writer | writes | commit → resolved p50 / p99 / max | delivery p50 / p99 | not delivered in 10 s |',
      '| --- | --- | --- | --- | --- |',
      ...waits.map(waitRow),
      '',
      `Reads against OpenFGA with its check cache on (TTL ${CACHE_TTL_MS / 1000} s, memory datastore), ${count(reads.without.length)} of each, interleaved:`,
      "the kit's `requestConsistency`, then a `check` at the consistency it chose (ms):",
      '',
      '| read | p50 | p99 | max |',
      '| --- | --- | --- | --- |',
      row('no token (MINIMIZE_LATENCY)', reads.without),
      row('a token older than the TTL, seen before (answered from memory)', reads.again),
      row('a token older than the TTL, seen first (one query: its rows and its tables)', reads.first),
    ].join('\n'),
    targets,
  };
}
