import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { createDrainer, type Logger, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueueMany, REGISTER_OUTBOX_PARTITION, type EnqueueInput, type OutboxSpec } from '@outbox/outbox';
import { createOpenFgaStore, openFgaClientConfig, startOpenFga, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql, type Kysely } from 'kysely';
import { describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { clientCredentials, key, startRefusingTokenIssuer, stored, storedOn } from './testing/fixtures.js';

// DB rows → the real drainer → this sink → the real OpenFGA.

const t = useTestDatabase();
const fga = useOpenFgaStore();
const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };
let tables = 0;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function freshOutbox(db: Kysely<any>): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({ table: `fga_e2e.outbox_${tables}`, partitionColumn: REGISTER_OUTBOX_PARTITION, maxAttempts: 10 });
  await createOutboxTable(db, spec);
  return spec;
}

async function enqueue(spec: OutboxSpec, intents: readonly EnqueueInput[]): Promise<string[]> {
  return t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
}

async function rows(spec: OutboxSpec) {
  const result = await sql<{ id: string; resource_id: string; sent: boolean; attempt_count: number; last_error: string | null }>`
    select t.id::text as id, resource_id, sent_at is not null as sent, attempt_count, last_error
    from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} t order by t.id`.execute(t.db);
  return result.rows;
}

/** One pass with a sink whose credentials are refused: it halts, and every row is left as it was (no attempt, no error). */
async function expectHaltUntouched(spec: OutboxSpec, sink: Sink): Promise<void> {
  const refused = createDrainer({ db: t.db, spec, sink, logger: quiet });
  try {
    expect(await refused.drainOnce()).toMatchObject({ delivered: 0, retried: 0, poisoned: 0, halted: true });
  } finally {
    await refused.stop();
  }
  expect((await rows(spec)).every((row) => !row.sent && row.attempt_count === 0 && row.last_error === null)).toBe(true);
}

const sinkFor = () => createOpenFgaSink({ ...openFgaClientConfig(fga.storeId, fga.authorizationModelId), storeId: fga.storeId });

describe('the real drainer delivering through the OpenFGA sink', () => {
  test('rows are marked sent and their tuples are readable, in partition order', async () => {
    const spec = await freshOutbox(t.db);
    const intents: EnqueueInput[] = [];
    for (let i = 0; i < 120; i += 1) {
      intents.push({ partitionKey: `vpc:e2e${i}`, payload: { writes: [key(`project:e2e project vpc:e2e${i}`), key(`user:ann owner vpc:e2e${i}`)] } });
    }
    // Forty resources change hands afterwards: the second intent of the partition deletes what the first wrote.
    for (let i = 0; i < 40; i += 1) {
      intents.push({ partitionKey: `vpc:e2e${i}`, payload: { deletes: [key(`user:ann owner vpc:e2e${i}`)], writes: [key(`user:bob owner vpc:e2e${i}`)] } });
    }
    await enqueue(spec, intents);
    const drainer = createDrainer({ db: t.db, spec, sink: sinkFor(), logger: quiet });
    try {
      const result = await drainer.drainOnce();
      expect(result).toMatchObject({ claimed: 160, delivered: 160, retried: 0, poisoned: 0, halted: false });
    } finally {
      await drainer.stop();
    }
    expect((await rows(spec)).every((row) => row.sent)).toBe(true);
    for (let i = 0; i < 120; i += 1) {
      const owner = i < 40 ? 'user:bob' : 'user:ann';
      expect(await storedOn(fga.client, `vpc:e2e${i}`)).toEqual([`${owner} owner vpc:e2e${i}`, `project:e2e project vpc:e2e${i}`].sort());
    }
  });

  test("one bad intent among 50 poisons only its row, with OpenFGA's message in last_error; the others are sent", async () => {
    const spec = await freshOutbox(t.db);
    await enqueue(
      spec,
      Array.from({ length: 50 }, (_, i) => ({
        partitionKey: `vpc:e2ebad${i}`,
        payload: { writes: [key(i === 17 ? `user:cy owner nosuchtype:e2ebad${i}` : `user:cy owner vpc:e2ebad${i}`)] },
      })),
    );
    const drainer = createDrainer({ db: t.db, spec, sink: sinkFor(), logger: quiet });
    try {
      expect(await drainer.drainOnce()).toMatchObject({ claimed: 50, delivered: 49, poisoned: 1, retried: 0, halted: false });
    } finally {
      await drainer.stop();
    }
    const all = await rows(spec);
    const bad = all.find((row) => row.resource_id === 'vpc:e2ebad17');
    expect(bad).toMatchObject({
      sent: false,
      attempt_count: 10,
      last_error: "OpenFGA 400 validation_error: Invalid tuple 'nosuchtype:e2ebad17#owner@user:cy'. Reason: type 'nosuchtype' not found",
    });
    expect(all.filter((row) => row.sent)).toHaveLength(49);
    expect(await stored(fga.client, key('user:cy owner vpc:e2ebad16'))).toBe(true);
  });

  test('client credentials refused by the token issuer (400 unauthorized_client): the pass halts, rows are released untouched, the issuer asked once', async () => {
    const issuer = await startRefusingTokenIssuer(400, 'unauthorized_client');
    try {
      const spec = await freshOutbox(t.db);
      await enqueue(spec, Array.from({ length: 30 }, (_, i) => ({ partitionKey: `vpc:e2etok${i}`, payload: { writes: [key(`user:di owner vpc:e2etok${i}`)] } })));
      // Not poisoned, not blamed on OpenFGA: no attempt counted, no last_error written.
      await expectHaltUntouched(
        spec,
        createOpenFgaSink({
          apiUrl: fga.apiUrl,
          storeId: fga.storeId,
          authorizationModelId: fga.authorizationModelId,
          credentials: clientCredentials(issuer.url, 'the-client-secret'),
        }),
      );
      expect(issuer.requests).toHaveLength(1);
    } finally {
      await issuer.close();
    }
  });

  test('credentials refused: the pass halts, rows are released untouched (no attempt, no error); the right key sends them', async () => {
    const server = await startOpenFga({ presharedKey: 'right' });
    try {
      const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl, { presharedKey: 'right' });
      const spec = await freshOutbox(t.db);
      await enqueue(spec, Array.from({ length: 30 }, (_, i) => ({ partitionKey: `vpc:e2ekey${i}`, payload: { writes: [key(`user:di owner vpc:e2ekey${i}`)] } })));
      const token = (value: string) => ({ method: CredentialsMethod.ApiToken as const, config: { token: value } });

      await expectHaltUntouched(spec, createOpenFgaSink({ apiUrl: server.apiUrl, storeId, authorizationModelId, credentials: token('wrong') }));

      const accepted = createDrainer({
        db: t.db,
        spec,
        sink: createOpenFgaSink({ apiUrl: server.apiUrl, storeId, authorizationModelId, credentials: token('right') }),
        logger: quiet,
      });
      try {
        expect(await accepted.drainOnce()).toMatchObject({ delivered: 30, poisoned: 0, halted: false });
      } finally {
        await accepted.stop();
      }
      const reader = new OpenFgaClient({ apiUrl: server.apiUrl, storeId, credentials: token('right') });
      expect(await stored(reader, key('user:di owner vpc:e2ekey29'))).toBe(true);
    } finally {
      await server.stop();
    }
  });
});
