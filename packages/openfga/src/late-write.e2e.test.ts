/**
 * The late write (docs/agreement.md, "Late writes"), reproduced with a real drainer, the real sink
 * and a real OpenFGA: drainer A sends a Write and loses its claim (its Postgres backend ended)
 * while a proxy holds the request; drainer B delivers the partition's intents; the held Write then
 * lands last. Without the late-write check OpenFGA keeps what the ledger revoked, every row
 * delivered; with it, OpenFGA equals the ledger within the horizon H.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createDrainer, type Drainer, type DrainerConfig } from '@outbox/drainer';
import type { IntentPayload, OutboxSpec } from '@outbox/outbox';
import {
  openFgaClientConfig,
  startDelayingProxy,
  useOpenFgaStore,
  useTestDatabase,
  type DelayingProxy,
} from '@outbox/test-stack';
import { storedOn } from '@outbox/test-stack/openfga';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { outboxTables, quiet, sinkOn } from './testing/fixtures.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

const OBJECT = 'vpc:late';
const grant = [
  { user: 'user:ann', relation: 'owner', object: OBJECT },
  { user: 'project:p1', relation: 'project', object: OBJECT },
];
const register: IntentPayload = { writes: grant };
const deregister: IntentPayload = { deletes: grant };
const granted = ['project:p1 project vpc:late', 'user:ann owner vpc:late'];

/** B's sink: direct to OpenFGA. Its writes live 1 s + OpenFGA's 3 s request timeout; the check waits 1 s more. */
const B_SINK = { timeoutMs: 1_000 } as const;
const VERIFY_DELAY_MS = 5_000;
const INTERVAL_MS = 100;
/** H: the check's delay, one drainer interval, one delivery (and room for a loaded machine). */
const HORIZON_MS = VERIFY_DELAY_MS + INTERVAL_MS + 2_000;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Polls `read` until `done` holds of its value, or `timeoutMs` passed; returns the last value. */
async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(50);
  }
}

async function ledger(spec: OutboxSpec) {
  const result = await sql<{
    id: string;
    delivered: boolean;
    source: string | null;
    stamped: boolean;
    payload: IntentPayload;
  }>`
    select id::text as id, sent_at is not null as delivered, payload->>'source' as source, verify_after is not null as stamped, payload
    from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} order by id`.execute(t.db);
  return result.rows;
}

/** Drainer A: one pooled connection (the backend the test ends), its sink through `proxy`, patient enough to wait for it. */
async function drainerThrough(spec: OutboxSpec, proxy: DelayingProxy): Promise<{ drainer: Drainer; pid: number }> {
  const pool = t.pool({ max: 1 });
  // The backend is ended under a checked-out client: pg reports it there.
  pool.on('connect', (client) => client.on('error', () => undefined));
  const db = new Kysely({ dialect: new PostgresDialect({ pool }) });
  cleanups.push(() => db.destroy());
  const pid = Number((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]?.pid);
  const sink = createOpenFgaSink({
    ...openFgaClientConfig(fga.storeId, fga.authorizationModelId),
    storeId: fga.storeId,
    apiUrl: `http://${proxy.host}:${proxy.port}`,
    timeoutMs: 30_000,
  });
  return { drainer: createDrainer({ db, spec, sink, logger: quiet, lateWrites: false }), pid };
}

/**
 * Before: `delivered` (if any) is delivered normally. Then A claims `late` and sends it, the proxy
 * holds the Write, A's backend is terminated; `after` is enqueued and B delivers `late` and `after`;
 * the proxy lets A's Write go and OpenFGA answers it. Returns B, started, and the outbox.
 */
async function lateWrite(
  steps: { delivered?: IntentPayload; late: IntentPayload; after: IntentPayload },
  lateWrites: DrainerConfig['lateWrites'],
) {
  const spec = await outbox.fresh();
  const b = createDrainer({
    db: t.db,
    spec,
    sink: sinkOn(fga, B_SINK),
    logger: quiet,
    intervalMs: INTERVAL_MS,
    lateWrites,
  });
  cleanups.push(() => b.stop());
  if (steps.delivered) {
    await outbox.enqueue(spec, [{ partitionKey: OBJECT, payload: steps.delivered }]);
    await b.drainOnce();
  }
  const upstream = new URL(fga.apiUrl);
  const proxy = await startDelayingProxy({ upstream: { host: upstream.hostname, port: Number(upstream.port) } });
  cleanups.push(() => proxy.close());
  await outbox.enqueue(spec, [{ partitionKey: OBJECT, payload: steps.late }]);

  proxy.pause();
  const a = await drainerThrough(spec, proxy);
  const aPass = a.drainer.drainOnce().then(
    () => new Error('A recorded its outcome: its claim was not lost'),
    (error: unknown) => error,
  );
  await eventually(
    async () => proxy.stats().requests,
    (n) => n >= 1,
    10_000,
  );
  expect(proxy.stats().requests).toBe(1); // A's Write, held
  await sql`select pg_terminate_backend(${a.pid})`.execute(t.db);

  await outbox.enqueue(spec, [{ partitionKey: OBJECT, payload: steps.after }]);
  // A's row locks go with its backend, a moment after the call: B claims both rows once they are free.
  await eventually(
    async () => (await b.drainOnce()).delivered,
    (n) => n > 0,
    10_000,
  );
  const deliveredAt = Date.now();
  expect((await ledger(spec)).every((row) => row.delivered)).toBe(true);
  const beforeLanding = await storedOn(fga.client, OBJECT);

  proxy.resume();
  // A gets OpenFGA's answer to its Write, then fails to record it on its ended session.
  expect(String(await aPass)).toMatch(/terminat|connection/i);
  expect(proxy.stats().requests).toBe(1);
  await b.start();
  return { spec, beforeLanding, deliveredAt };
}

describe.each([
  {
    name: 'a register landing after its deregister resurrects the revoked grant',
    steps: { late: register, after: deregister },
    ledgerSays: [],
  },
  {
    name: 'a deregister landing after the re-register removes the new grant',
    steps: { delivered: register, late: deregister, after: register },
    ledgerSays: granted,
  },
])('$name', ({ steps, ledgerSays }) => {
  test('without the late-write check it stays so for good, every row delivered (the bug)', async () => {
    const { spec, beforeLanding } = await lateWrite(steps, false);
    expect(beforeLanding).toEqual(ledgerSays);
    const wrong = ledgerSays.length > 0 ? [] : granted;
    expect(await storedOn(fga.client, OBJECT)).toEqual(wrong);
    await sleep(HORIZON_MS);
    expect(await storedOn(fga.client, OBJECT)).toEqual(wrong);
    const rows = await ledger(spec);
    expect(rows.every((row) => row.delivered && row.source === null && !row.stamped)).toBe(true);
  }, 60_000);

  test('with it, OpenFGA equals the ledger within H, through a correction the outbox delivered', async () => {
    const { spec, beforeLanding, deliveredAt } = await lateWrite(steps, undefined);
    expect(beforeLanding).toEqual(ledgerSays);
    expect(await storedOn(fga.client, OBJECT)).not.toEqual(ledgerSays); // the late Write landed
    const final = await eventually(
      () => storedOn(fga.client, OBJECT),
      (stored) => stored.join() === ledgerSays.join(),
      deliveredAt + HORIZON_MS - Date.now(),
    );
    expect(final).toEqual(ledgerSays);
    const rows = await eventually(
      () => ledger(spec),
      (r) => r.every((row) => row.delivered && !row.stamped),
      5_000,
    );
    const corrections = rows.filter((row) => row.source === 'late-write');
    expect(corrections).toHaveLength(1);
    expect(corrections[0]).toMatchObject({
      delivered: true,
      payload: ledgerSays.length > 0 ? { writes: grant } : { deletes: grant },
    });
    expect(rows.every((row) => row.delivered && !row.stamped)).toBe(true); // nothing left to check: it terminated
  }, 60_000);
});
