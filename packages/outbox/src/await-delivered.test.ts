import { useTestDatabase } from '@outbox/test-stack';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { awaitDelivered, outboxToken } from './await-delivered.js';
import { decodeOutboxToken, encodeOutboxToken, mergeOutboxTokens } from './consistency-token.js';
import { defineOutbox } from './define-outbox.js';
import { enqueueMany } from './enqueue.js';
import { OutboxTokenError } from './errors.js';
import { createOutboxTable, dropOutboxTable } from './schema/migration.js';

const t = useTestDatabase();
const spec = defineOutbox({ table: 'tokens.outbox', partitionColumn: 'resource_id', maxAttempts: 3 });
const other = defineOutbox({ table: 'tokens.other_outbox', partitionColumn: 'resource_id' });

const payload = (object: string) => ({ writes: [{ user: 'project:p1', relation: 'project', object }] });

/** Commits one intent per key and returns their ids and token. */
async function write(keys: readonly string[], target = spec): Promise<{ ids: string[]; token: string }> {
  return t.db.transaction().execute(async (trx) => {
    const ids = await enqueueMany(
      trx,
      target,
      keys.map((partitionKey) => ({ partitionKey, payload: payload(partitionKey) })),
    );
    return { ids, token: await outboxToken(trx, target, ids) };
  });
}

const setRows = (ids: readonly string[], set: string) =>
  sql.raw(`update tokens.outbox set ${set}, is_head = false where id in (${ids.join(',')})`).execute(t.db);

async function tokenError(work: Promise<unknown>): Promise<OutboxTokenError> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OutboxTokenError);
  return error as OutboxTokenError;
}

beforeAll(async () => {
  await createOutboxTable(t.db, spec);
  await createOutboxTable(t.db, other);
});

describe('awaitDelivered', () => {
  test('says what became of each intent: delivered (with when and how long ago), poisoned (with its cause), superseded, blocked, retired', async () => {
    const delivered = await write(['vpc:d']);
    await setRows(delivered.ids, "sent_at = now() - interval '2 seconds'");
    const poisoned = await write(['vpc:p', 'vpc:p']);
    await setRows(
      poisoned.ids.slice(0, 1),
      "attempt_count = 3, poison_cause = 'refused', poison_code = 'validation_error', last_error = 'type vpc not found'",
    );
    const superseded = await write(['vpc:s', 'vpc:s']);
    await setRows(superseded.ids.slice(0, 1), 'attempt_count = 3');
    await setRows(superseded.ids.slice(1), 'sent_at = now()');
    const retired = await write(['vpc:r']);
    await setRows(
      retired.ids,
      "attempt_count = 3, retired_at = now(), retired_reason = 'ticket 7', closed_as = 'discarded'",
    );
    const token = mergeOutboxTokens(delivered.token, poisoned.token, superseded.token, retired.token);

    const started = Date.now();
    const result = await awaitDelivered(t.db, token, { timeoutMs: 10_000 });
    // Nothing here will move without a person or the reconciler: it answers at once, not at the timeout.
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result.settled).toBe(true);
    expect(result.delivered).toBe(false);
    const [d, p, blocked, s, sDelivered, r] = result.intents;
    expect(d).toMatchObject({ table: 'tokens.outbox', id: delivered.ids[0], status: 'delivered' });
    expect(d?.status === 'delivered' && d.deliveredAt).toBeInstanceOf(Date);
    expect(p).toEqual({
      table: 'tokens.outbox',
      id: poisoned.ids[0],
      status: 'poisoned',
      cause: 'refused',
      code: 'validation_error',
      lastError: 'type vpc not found',
    });
    expect(blocked).toEqual({
      table: 'tokens.outbox',
      id: poisoned.ids[1],
      status: 'blocked',
      blockedBy: poisoned.ids[0],
    });
    expect(s).toEqual({ table: 'tokens.outbox', id: superseded.ids[0], status: 'superseded' });
    expect(sDelivered?.status).toBe('delivered');
    expect(r).toEqual({
      table: 'tokens.outbox',
      id: retired.ids[0],
      status: 'retired',
      reason: 'ticket 7',
      closedAs: 'discarded',
    });
    // The newest delivery (the superseding one) is a moment old by the database's clock, not 2 s.
    expect(result.newestDeliveryAgeMs).toBeGreaterThanOrEqual(0);
    expect(result.newestDeliveryAgeMs).toBeLessThan(1_500);
  });

  test('waits for a pending intent and resolves when it is delivered; at the timeout it says pending', async () => {
    const { ids, token } = await write(['vpc:w']);
    const atOnce = await awaitDelivered(t.db, token, { timeoutMs: 0 });
    expect(atOnce).toMatchObject({ settled: false, delivered: false, newestDeliveryAgeMs: undefined });
    expect(atOnce.intents).toEqual([{ table: 'tokens.outbox', id: ids[0], status: 'pending' }]);
    const timedOut = await awaitDelivered(t.db, token, { timeoutMs: 150 });
    expect(timedOut.intents[0]?.status).toBe('pending');

    const waiting = awaitDelivered(t.db, token, { timeoutMs: 20_000 });
    setTimeout(() => void setRows(ids, 'sent_at = now()'), 200);
    const result = await waiting;
    expect(result).toMatchObject({ settled: true, delivered: true });
  });

  test('waits side by side share their reads: one query in flight per outbox, each wait told its own intents', async () => {
    const writes = await Promise.all(Array.from({ length: 20 }, (_, i) => write([`vpc:side-${i}`])));
    const reads: string[] = [];
    const db = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: t.url, max: 20 }) }),
      log: (event) => {
        if (event.level === 'query' && event.query.sql.includes('as blocked_by')) reads.push(event.query.sql);
      },
    });
    onTestFinished(() => db.destroy());
    const waits = writes.map(({ token }) => awaitDelivered(db, token, { timeoutMs: 20_000 }));
    setTimeout(
      () =>
        void setRows(
          writes.slice(0, 10).flatMap((w) => w.ids),
          'sent_at = now()',
        ),
      150,
    );
    setTimeout(
      () =>
        void setRows(
          writes.slice(10).flatMap((w) => w.ids),
          'sent_at = now()',
        ),
      300,
    );
    const results = await Promise.all(waits);
    results.forEach((result, i) => {
      expect(result.delivered).toBe(true);
      expect(result.intents.map((o) => o.id)).toEqual(writes[i]?.ids);
    });
    // Alone, each wait reads about 20 times in 300 ms (its pauses: 1, 2, 2, 3 … 25 ms): 400 reads.
    // Shared, one is in flight at a time: back to back, about 60.
    expect(reads.length).toBeLessThan(150);
    // A wait left with nothing to read rejects nothing of the others: a compacted intent is its own error.
    const gone = await write(['vpc:side-gone']);
    await sql.raw(`delete from tokens.outbox where id = ${gone.ids[0]}`).execute(t.db);
    const [kept, compacted] = await Promise.allSettled([
      awaitDelivered(db, writes[0]!.token, { timeoutMs: 0 }),
      awaitDelivered(db, gone.token, { timeoutMs: 0 }),
    ]);
    expect(kept).toMatchObject({ status: 'fulfilled', value: { delivered: true } });
    expect(compacted).toMatchObject({ status: 'rejected', reason: { kind: 'compacted' } });
  });

  test('a first look is one statement: the rows and the identity check read together', async () => {
    const { ids, token } = await write(['vpc:one-look']);
    await setRows(ids, 'sent_at = now()');
    const statements: string[] = [];
    const db = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: t.url, max: 2 }) }),
      log: (event) => {
        if (event.level === 'query') statements.push(event.query.sql);
      },
    });
    onTestFinished(() => db.destroy());
    expect((await awaitDelivered(db, token, { timeoutMs: 0 })).delivered).toBe(true);
    expect(statements).toHaveLength(1);
    expect(statements[0]).toMatch(/pg_control_system/);
  });

  test('a token of two outboxes waits on both', async () => {
    const a = await write(['vpc:a']);
    const b = await write(['vpc:b'], other);
    await setRows(a.ids, 'sent_at = now()');
    const merged = mergeOutboxTokens(a.token, b.token);
    expect((await awaitDelivered(t.db, merged, { timeoutMs: 0 })).intents.map((i) => [i.table, i.status])).toEqual([
      ['tokens.other_outbox', 'pending'],
      ['tokens.outbox', 'delivered'],
    ]);
  });

  test('a compacted intent, a token of another database, and a re-created table are typed errors that say which', async () => {
    const gone = await write(['vpc:c']);
    await sql.raw(`delete from tokens.outbox where id = ${gone.ids[0]}`).execute(t.db);
    const compacted = await tokenError(awaitDelivered(t.db, gone.token, { timeoutMs: 1_000 }));
    expect(compacted.kind).toBe('compacted');
    expect(compacted.ids).toEqual([`tokens.outbox#${gone.ids[0]}`]);
    expect(compacted.message).toMatch(/treat as delivered/);

    const { token } = await write(['vpc:x']);
    const contents = decodeOutboxToken(token);
    const elsewhere = encodeOutboxToken({ ...contents, database: `1/${t.name}` });
    expect((await tokenError(awaitDelivered(t.db, elsewhere, { timeoutMs: 0 }))).kind).toBe('other-database');

    const recreatedSpec = defineOutbox({ table: 'tokens.recreated', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, recreatedSpec);
    const before = await write(['vpc:y'], recreatedSpec);
    await dropOutboxTable(t.db, recreatedSpec);
    const missing = await tokenError(awaitDelivered(t.db, before.token, { timeoutMs: 0 }));
    expect([missing.kind, missing.message]).toEqual(['other-outbox', expect.stringMatching(/does not have/)]);
    await createOutboxTable(t.db, recreatedSpec);
    const recreated = await tokenError(awaitDelivered(t.db, before.token, { timeoutMs: 0 }));
    expect([recreated.kind, recreated.message]).toEqual(['other-outbox', expect.stringMatching(/created again/)]);
  });

  test('a malformed token is a typed error, and timeoutMs is required', async () => {
    for (const bad of [
      '',
      'abc',
      'ot1.',
      'ot1.e30',
      `ot1.${Buffer.from('{"d":"1/x","o":[["a.b",1,"c","5-3"]]}').toString('base64url')}`,
    ]) {
      expect((await tokenError(awaitDelivered(t.db, bad, { timeoutMs: 0 }))).kind).toBe('malformed');
    }
    const { token } = await write(['vpc:m']);
    await expect(awaitDelivered(t.db, token, {} as never)).rejects.toThrow(/timeoutMs/);
  });

  test('a role with no special privilege mints and waits on tokens', async () => {
    const role = `tokens_reader_${process.pid}`;
    await sql.raw(`create role ${role} login password 'pw'`).execute(t.db);
    await sql.raw(`grant usage on schema tokens to ${role}; grant select on tokens.outbox to ${role}`).execute(t.db);
    const url = new URL(t.url);
    url.username = role;
    url.password = 'pw';
    const db = new Kysely({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url.toString(), max: 1 }) }),
    });
    try {
      const { ids, token } = await write(['vpc:role']);
      expect(await outboxToken(db, spec, ids)).toBe(token);
      expect((await awaitDelivered(db, token, { timeoutMs: 0 })).intents[0]?.status).toBe('pending');
    } finally {
      await db.destroy();
    }
  });
});
