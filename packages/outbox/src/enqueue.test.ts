import { setTimeout as sleep } from 'node:timers/promises';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { defineOutbox } from './define-outbox.js';
import { enqueue, enqueueMany, MAX_INTENTS_PER_ENQUEUE, type EnqueueInput } from './enqueue.js';
import { OutboxConfigError, OutboxTableError } from './errors.js';
import { createOutboxTable, dropOutboxTable } from './schema/migration.js';
import type { AnyKysely } from './any-kysely.js';

const t = useTestDatabase();
const spec = defineOutbox({ table: 'app.outbox', partitionColumn: 'resource_id', channel: 'app_outbox_test' });

/** An intent whose payload names `marker` (default: the key's id), so a row can be traced back to its input. */
const intent = (partitionKey: string, marker = partitionKey.replace(/^vpc:/, '')): EnqueueInput => ({
  partitionKey,
  payload: { writes: [{ user: 'project:p1', relation: 'project', object: `vpc:${marker}` }] },
});

interface Row {
  id: string;
  resource_id: string;
  object: string;
}
async function rows(db: AnyKysely = t.db): Promise<Row[]> {
  const result = await sql<Row>`
    select id, resource_id, payload->'writes'->0->>'object' as object from app.outbox order by id`.execute(db);
  return result.rows;
}

/** Whether `promise` settles within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const settled = Symbol('settled');
  const outcome = await Promise.race([
    promise.then(
      () => settled,
      () => settled,
    ),
    sleep(ms).then(() => 'pending'),
  ]);
  return outcome === settled;
}

/** Polls until `check` returns true (or fails after `ms`). */
async function eventually(check: () => Promise<boolean> | boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await sleep(20);
  }
}

/** What the backend `pid` is waiting on, per pg_stat_activity and pg_locks. */
async function waitOf(pid: number) {
  const result = await sql<{ wait_event_type: string | null; wait_event: string | null; ungranted_advisory: string }>`
    select a.wait_event_type, a.wait_event,
           (select count(*) from pg_locks l where l.pid = a.pid and l.locktype = 'advisory' and not l.granted) as ungranted_advisory
    from pg_stat_activity a where a.pid = ${pid}`.execute(t.db);
  return result.rows[0];
}

async function backendPid(db: AnyKysely): Promise<number> {
  const result = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
  return result.rows[0]!.pid;
}

beforeAll(async () => {
  await createOutboxTable(t.db, spec);
  await sql`create table app.resources (id text primary key)`.execute(t.db);
});

afterEach(async () => {
  await sql`truncate app.outbox, app.resources`.execute(t.db);
});

describe('enqueue runs in the caller transaction', () => {
  test('a committed enqueue leaves its row, with the resource row written beside it', async () => {
    const id = await t.db.transaction().execute(async (trx) => {
      await sql`insert into app.resources values ('v1')`.execute(trx);
      return enqueue(trx, spec, intent('vpc:v1', 'v1'));
    });
    expect(id).toMatch(/^\d+$/);
    expect(await rows()).toEqual([{ id, resource_id: 'vpc:v1', object: 'vpc:v1' }]);
    const stored = await sql<{ attempt_count: number; sent_at: Date | null; payload: unknown }>`
      select attempt_count, sent_at, payload from app.outbox`.execute(t.db);
    expect(stored.rows[0]).toEqual({ attempt_count: 0, sent_at: null, payload: intent('vpc:v1', 'v1').payload });
  });

  test('an enqueue in a rolled-back transaction leaves no row', async () => {
    await expect(
      t.db.transaction().execute(async (trx) => {
        await sql`insert into app.resources values ('v1')`.execute(trx);
        await enqueueMany(trx, spec, [intent('vpc:v1'), intent('vpc:v2')]);
        throw new Error('the service failed after enqueueing');
      }),
    ).rejects.toThrow('the service failed');
    expect(await rows()).toEqual([]);
  });

  test('enqueue outside a transaction is an OutboxConfigError on field "trx", and writes nothing', async () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const plain = t.db as any;
    await expect(enqueue(plain, spec, intent('vpc:v1'))).rejects.toSatisfy(
      (e) => e instanceof OutboxConfigError && e.field === 'trx',
    );
    await expect(enqueueMany(plain, spec, [intent('vpc:v1')])).rejects.toSatisfy(
      (e) => e instanceof OutboxConfigError && e.field === 'trx',
    );
    // A single connection is not a transaction either: each statement would commit on its own.
    await t.db.connection().execute(async (connection) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      await expect(enqueue(connection as any, spec, intent('vpc:v1'))).rejects.toSatisfy(
        (e) => e instanceof OutboxConfigError && e.field === 'trx',
      );
    });
    expect(await rows()).toEqual([]);
  });

  test('a table an earlier release made, without the enqueue function: an OutboxTableError naming it, and nothing written', async () => {
    const earlier = defineOutbox({ table: 'app.earlier_outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, earlier);
    await sql.raw('drop function app.earlier_outbox_enqueue').execute(t.db);
    const failure = await t.db
      .transaction()
      .execute((trx) => enqueue(trx, earlier, intent('vpc:v1')))
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(OutboxTableError);
    expect((failure as OutboxTableError).missing).toEqual([
      expect.stringMatching(/^function app\.earlier_outbox_enqueue .*0006_enqueue_function_v1/),
    ]);
    const written = await sql<{ n: string }>`select count(*) as n from app.earlier_outbox`.execute(t.db);
    expect(written.rows[0]!.n).toBe('0');
    await dropOutboxTable(t.db, earlier);
  });

  test('enqueueMany of no intents writes nothing and returns no ids', async () => {
    expect(await t.db.transaction().execute((trx) => enqueueMany(trx, spec, []))).toEqual([]);
    expect(await rows()).toEqual([]);
  });
});

describe('NOTIFY on the spec channel', () => {
  let listener: pg.Client;
  const received: pg.Notification[] = [];

  beforeAll(async () => {
    listener = new pg.Client({ connectionString: t.url });
    await listener.connect();
    listener.on('notification', (message) => received.push(message));
    await listener.query(`listen ${listener.escapeIdentifier(spec.channel)}`);
  });
  afterAll(async () => {
    await listener.end();
  });
  afterEach(() => {
    received.length = 0;
  });

  test('nothing arrives before COMMIT; exactly one arrives after one enqueueMany of several rows', async () => {
    await t.withTransactions(1, async ([trx]) => {
      await enqueueMany(trx!, spec, [intent('vpc:v1'), intent('vpc:v2'), intent('vpc:v1', 'v1-again')]);
      await sleep(300);
      expect(received).toEqual([]);

      await trx!.commit().execute();
      await eventually(() => received.length > 0);
      await sleep(300); // room for a (wrong) second notification to arrive
      expect(received).toHaveLength(1);
      expect(received[0]).toMatchObject({ channel: spec.channel, payload: '' });
      expect(await rows()).toHaveLength(3);
    });
  });

  test('a rolled-back enqueue sends no notification', async () => {
    await t.db
      .transaction()
      .execute(async (trx) => {
        await enqueueMany(trx, spec, [intent('vpc:v1'), intent('vpc:v2')]);
        throw new Error('rollback');
      })
      .catch(() => undefined);
    // A committed enqueue after it proves the listener is live and gives the rollback time to show.
    await t.db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:v3')));
    await eventually(() => received.length > 0);
    await sleep(300);
    expect(received).toHaveLength(1);
    expect((await rows()).map((r) => r.resource_id)).toEqual(['vpc:v3']);
  });

  test('each committed transaction notifies once', async () => {
    for (const key of ['vpc:v1', 'vpc:v2', 'vpc:v3']) {
      await t.db.transaction().execute((trx) => enqueue(trx, spec, intent(key)));
    }
    await eventually(() => received.length >= 3);
    await sleep(300);
    expect(received).toHaveLength(3);
  });
});

describe('ids', () => {
  test('enqueueMany returns ids in input order, ascending, each the row of its own intent', async () => {
    await t.db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:before')));
    const keys = ['vpc:b', 'vpc:a', 'vpc:c', 'vpc:a', 'vpc:b', 'vpc:z', 'vpc:a'];
    const intents = keys.map((key, i) => intent(key, `m${i}`));
    const ids = await t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));

    expect(ids).toHaveLength(keys.length);
    const numeric = ids.map(BigInt);
    expect(numeric).toEqual([...numeric].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    expect(new Set(ids).size).toBe(ids.length);
    const byId = new Map((await rows()).map((r) => [r.id, r]));
    ids.forEach((id, i) => {
      expect(byId.get(id)).toEqual({ id, resource_id: keys[i], object: `vpc:m${i}` });
    });
  });

  test('a batch of 500 intents over 37 keys keeps input order in its ids', async () => {
    const intents = Array.from({ length: 500 }, (_, i) => intent(`vpc:k${(i * 7) % 37}`, `m${i}`));
    const ids = await t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
    const stored = await rows();
    expect(stored.map((r) => r.id)).toEqual(ids);
    expect(stored.map((r) => r.object)).toEqual(intents.map((_, i) => `vpc:m${i}`));
  });
});

describe('the partition advisory lock', () => {
  test('a second transaction for the same partition waits for the first, and takes its id only after it commits', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      const bPid = await backendPid(b!);
      const aId = await enqueue(a!, spec, intent('vpc:shared', 'from-a'));
      const bEnqueue = enqueue(b!, spec, intent('vpc:shared', 'from-b'));
      expect(await settlesWithin(bEnqueue, 300)).toBe(false);
      await eventually(async () => (await waitOf(bPid))?.wait_event === 'advisory');
      expect(await waitOf(bPid)).toEqual({ wait_event_type: 'Lock', wait_event: 'advisory', ungranted_advisory: '1' });

      // Another partition does not wait, and its id is taken while b is still blocked.
      const otherId = await t.db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:other')));

      await a!.commit().execute();
      const bId = await bEnqueue;
      await b!.commit().execute();

      // a committed first and has the smaller id; b's insert ran after a released the lock.
      expect(BigInt(aId)).toBeLessThan(BigInt(otherId));
      expect(BigInt(otherId)).toBeLessThan(BigInt(bId));
      expect((await rows()).map((r) => r.object)).toEqual(['vpc:from-a', 'vpc:other', 'vpc:from-b']);
    });
  });

  test('a rolled-back holder releases the lock', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      await enqueue(a!, spec, intent('vpc:shared', 'from-a'));
      const bEnqueue = enqueue(b!, spec, intent('vpc:shared', 'from-b'));
      expect(await settlesWithin(bEnqueue, 300)).toBe(false);
      await a!.rollback().execute();
      await bEnqueue;
      await b!.commit().execute();
      expect((await rows()).map((r) => r.object)).toEqual(['vpc:from-b']);
    });
  });

  test('transactions for different partitions do not wait on each other', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      const bPid = await backendPid(b!);
      await enqueueMany(a!, spec, [intent('vpc:a1'), intent('vpc:a2')]);
      const bEnqueue = enqueueMany(b!, spec, [intent('vpc:b1'), intent('vpc:b2')]);
      expect(await settlesWithin(bEnqueue, 2_000)).toBe(true);
      expect((await waitOf(bPid))?.ungranted_advisory).toBe('0');
      // b commits while a is still open: nothing orders them.
      await b!.commit().execute();
      await a!.commit().execute();
      expect((await rows()).map((r) => r.resource_id).sort()).toEqual(['vpc:a1', 'vpc:a2', 'vpc:b1', 'vpc:b2']);
    });
  });

  test('enqueueMany waits when any one of its partitions is held', async () => {
    await t.withTransactions(2, async ([a, b]) => {
      await enqueue(a!, spec, intent('vpc:k2'));
      const bEnqueue = enqueueMany(b!, spec, [intent('vpc:k1'), intent('vpc:k2'), intent('vpc:k3')]);
      expect(await settlesWithin(bEnqueue, 300)).toBe(false);
      await a!.commit().execute();
      await bEnqueue;
      await b!.commit().execute();
      expect(await rows()).toHaveLength(4);
    });
  });

  test('concurrent batches over the same keys in opposite orders never deadlock', async () => {
    // Big batches, so that two lock statements overlap; locking in input order deadlocks here.
    const keys = Array.from({ length: MAX_INTENTS_PER_ENQUEUE }, (_, i) => `vpc:k${i}`);
    const interleaved = keys.filter((_, i) => i % 2 === 1).concat(keys.filter((_, i) => i % 2 === 0));
    const orders = [keys, [...keys].reverse(), interleaved];
    const workers = orders.map(async (order) => {
      const db = t.kysely({ max: 1 });
      try {
        for (let round = 0; round < 10; round++) {
          await db.transaction().execute((trx) =>
            enqueueMany(
              trx,
              spec,
              order.map((key) => intent(key)),
            ),
          );
        }
      } finally {
        await db.destroy();
      }
    });
    await Promise.all(workers);
    expect(await rows()).toHaveLength(orders.length * 10 * keys.length);
  });
});

describe('isolation level: enqueue needs READ COMMITTED', () => {
  /** The advisory locks held by the backend of `db` (a transaction's connection). */
  async function advisoryLocks(db: AnyKysely): Promise<number> {
    const result = await sql<{ held: string }>`
      select count(*) as held from pg_locks where pid = pg_backend_pid() and locktype = 'advisory'`.execute(db);
    return Number(result.rows[0]!.held);
  }

  const refusal = (isolation: string) => (e: unknown) =>
    e instanceof OutboxConfigError &&
    e.field === 'trx' &&
    e.message.includes(isolation) &&
    e.message.includes("setIsolationLevel('read committed')");

  test.each([
    ['repeatable read', 'REPEATABLE READ'],
    ['serializable', 'SERIALIZABLE'],
  ] as const)(
    'in a %s transaction, enqueue and enqueueMany refuse with an OutboxConfigError, take no lock and write nothing',
    async (level, named) => {
      await t.db
        .transaction()
        .setIsolationLevel(level)
        .execute(async (trx) => {
          await sql`insert into app.resources values ('v1')`.execute(trx);
          await expect(enqueue(trx, spec, intent('vpc:v1'))).rejects.toSatisfy(refusal(named));
          await expect(enqueueMany(trx, spec, [intent('vpc:v1'), intent('vpc:v2')])).rejects.toSatisfy(refusal(named));
          // The refusal is not a database error: the transaction is still usable, and holds no partition lock.
          expect(await advisoryLocks(trx)).toBe(0);
          const inside = await sql<{ n: string }>`select count(*) as n from app.outbox`.execute(trx);
          expect(inside.rows[0]!.n).toBe('0');
        });
      // The caller's own row committed; no intent did.
      expect(await rows()).toEqual([]);
      // Another transaction can take the partition at once: nothing was left locked.
      const id = await t.db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:v1')));
      expect((await rows()).map((r) => r.id)).toEqual([id]);
    },
  );

  test('a refused enqueue inside a transaction the caller then commits leaves no row behind', async () => {
    await t.db
      .transaction()
      .setIsolationLevel('serializable')
      .execute(async (trx) => {
        await enqueue(trx, spec, intent('vpc:v1')).catch(() => undefined);
      });
    expect(await rows()).toEqual([]);
  });

  test('with a pool whose default is SERIALIZABLE: refused by default, accepted in a transaction set to READ COMMITTED', async () => {
    const db = t.kysely({ max: 1, options: '-c default_transaction_isolation=serializable' });
    try {
      await expect(db.transaction().execute((trx) => enqueue(trx, spec, intent('vpc:v1')))).rejects.toSatisfy(
        refusal('SERIALIZABLE'),
      );
      expect(await rows()).toEqual([]);
      const ids = await db
        .transaction()
        .setIsolationLevel('read committed')
        .execute((trx) => enqueueMany(trx, spec, [intent('vpc:v1'), intent('vpc:v1', 'second')]));
      expect((await rows()).map((r) => r.id)).toEqual(ids);
      const heads = await sql<{ id: string }>`select id from app.outbox where is_head order by id`.execute(t.db);
      expect(heads.rows.map((r) => r.id)).toEqual([ids[0]]);
    } finally {
      await db.destroy();
    }
  });
});
