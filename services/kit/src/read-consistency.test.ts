import { createOutboxTable, defineOutbox, enqueue, outboxToken } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeAll, expect, test } from 'vitest';
import { HttpError } from './errors.js';
import { DeliveredTokens, requestConsistency, type ConsistencyOptions } from './read-consistency.js';

const t = useTestDatabase();
const spec = defineOutbox({ table: 'consistency.outbox', partitionColumn: 'resource_id' });
let options: ConsistencyOptions;

beforeAll(async () => {
  await createOutboxTable(t.db, spec);
  options = { db: t.db, outbox: spec, timeoutMs: 200, checkCacheTtlMs: 10_000 };
});

async function written(delivered?: string): Promise<{ id: string; token: string }> {
  return t.db.transaction().execute(async (trx) => {
    const id = await enqueue(trx, spec, {
      partitionKey: 'vpc:1',
      payload: { writes: [{ user: 'project:p', relation: 'project', object: 'vpc:1' }] },
    });
    if (delivered)
      await sql
        .raw(`update consistency.outbox set sent_at = ${delivered}, is_head = false where id = ${id}`)
        .execute(trx);
    return { id, token: await outboxToken(trx, spec, [id]) };
  });
}

const header = (token: string) => `at-least-as-fresh ${token}`;

async function refusal(work: Promise<unknown>): Promise<HttpError> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(HttpError);
  return error as HttpError;
}

test('no header: MINIMIZE_LATENCY, no query', async () => {
  expect(await requestConsistency(undefined, { ...options, db: undefined as never })).toEqual({
    consistency: 'minimize',
    waitedMs: 0,
  });
});

test('a delivery younger than the TTL checks at HIGHER_CONSISTENCY, an older one at MINIMIZE_LATENCY', async () => {
  expect((await requestConsistency(header((await written('now()')).token), options)).consistency).toBe('higher');
  const old = await written("now() - interval '1 minute'");
  expect((await requestConsistency(header(old.token), options)).consistency).toBe('minimize');
});

test('a token still pending at the timeout is a 503 token_pending with Retry-After; a bad one a 400', async () => {
  const pending = await refusal(requestConsistency(header((await written()).token), options));
  expect([pending.status, pending.code, pending.headers]).toEqual([503, 'token_pending', { 'retry-after': '1' }]);
  const wrongForm = await refusal(requestConsistency('newer-than xyz', options));
  expect([wrongForm.status, wrongForm.code]).toEqual([400, 'invalid_consistency_token']);
  const malformed = await refusal(requestConsistency(header('ot1.garbage'), options));
  expect([malformed.status, malformed.message]).toEqual([
    400,
    expect.stringMatching(/not an outbox consistency token/),
  ]);
});

test('a compacted token was delivered long ago: MINIMIZE_LATENCY', async () => {
  const gone = await written("now() - interval '40 days'");
  await sql.raw(`delete from consistency.outbox where id = ${gone.id}`).execute(t.db);
  expect((await requestConsistency(header(gone.token), options)).consistency).toBe('minimize');
});

test('a token seen wholly delivered is answered from memory: no query, the age still counted', async () => {
  const delivered = new DeliveredTokens();
  const { token } = await written("now() - interval '9950 milliseconds'");
  expect((await requestConsistency(header(token), { ...options, delivered })).consistency).toBe('higher');
  // No database now: the answer comes from memory, and the delivery has meanwhile aged past the TTL.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const remembered = await requestConsistency(header(token), { ...options, delivered, db: undefined as never });
  expect(remembered).toEqual({ consistency: 'minimize', waitedMs: 0 });
  // A pending token is not remembered: its next request asks the database again.
  const pending = await written();
  await refusal(requestConsistency(header(pending.token), { ...options, delivered }));
  expect(delivered.ageMs(pending.token)).toBeUndefined();
});
