import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { createDrainer, SinkHaltError, type Logger, type Outcome, type Sink } from '@outbox/drainer';
import { createOutboxTable, defineOutbox, enqueueMany, REGISTER_OUTBOX_PARTITION, type EnqueueInput, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import {
  createDatabase,
  createOpenFgaStore,
  dropDatabase,
  openFgaClientConfig,
  stackInfo,
  startOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { clientCredentials, intent, key, noDeadline, startRefusingTokenIssuer } from './testing/fixtures.js';

// Replays, configuration faults and what errors carry, against the real OpenFGA (and, where a
// drainer is involved, the real drainer and Postgres).

const t = useTestDatabase();
const fga = useOpenFgaStore();
const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };
const kinds = (outcomes: readonly Outcome[]) => outcomes.map((o) => o.kind);
const sinkFor = () => createOpenFgaSink({ ...openFgaClientConfig(fga.storeId, fga.authorizationModelId), storeId: fga.storeId });
const grant = (expires: string) => ({ name: 'non_expired_grant', context: { grant_expires_at: expires } });
const withCondition = (text: string, condition?: { name: string; context?: Record<string, unknown> }): IntentPayload => ({
  writes: [{ ...key(text), ...(condition ? { condition } : {}) }],
});

/** The exact stored tuple on `object`, condition included, as OpenFGA reads it back. */
async function storedWithCondition(object: string): Promise<unknown[]> {
  const { tuples } = await fga.client.read({ object });
  return tuples.map((t) => ({ user: t.key.user, relation: t.key.relation, object: t.key.object, condition: t.key.condition ?? undefined }));
}

let tables = 0;
async function freshOutbox(): Promise<OutboxSpec> {
  tables += 1;
  const spec = defineOutbox({ table: `fga_faults.outbox_${tables}`, partitionColumn: REGISTER_OUTBOX_PARTITION, maxAttempts: 10 });
  await createOutboxTable(t.db, spec);
  return spec;
}
async function enqueue(spec: OutboxSpec, intents: readonly EnqueueInput[]): Promise<void> {
  await t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
}
async function rows(spec: OutboxSpec) {
  const result = await sql<{ id: string; sent: boolean; attempt_count: number; last_error: string | null }>`
    select t.id::text as id, sent_at is not null as sent, attempt_count, last_error
    from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} t order by t.id`.execute(t.db);
  return result.rows;
}

describe('an at-least-once replay of a conditional write that a later intent deleted and rewrote', () => {
  // A crash (or the drainer's deadline, or a halt later in the call) after OpenFGA applied a run
  // but before the outcomes were recorded makes the drainer send the same run again.
  test.each([
    ['with a condition, then deleted and written without one', grant('2030-01-01T00:00:00Z'), undefined],
    ['without a condition, then deleted and written with one', undefined, grant('2030-01-01T00:00:00Z')],
    ['with a condition, then deleted and written with another context (a grant extended)', grant('2030-01-01T00:00:00Z'), grant('2031-01-01T00:00:00Z')],
  ])('written %s: the replay of the whole run is delivered (not poisoned) and the store ends as the run says', async (_, first, last) => {
    const object = `project:replay${first ? 'c' : 'u'}${last ? (last.context.grant_expires_at.startsWith('2031') ? 'x' : 'c') : 'u'}`;
    const tuple = `user:rita viewer ${object}`;
    const run = [intent(object, withCondition(tuple, first)), intent(object, { deletes: [key(tuple)] }), intent(object, withCondition(tuple, last))];
    const sink = sinkFor();
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    // The replay: OpenFGA answers the first intent with 409 "different condition" (the tuple is the
    // third intent's now). The first intent's effect is erased by the second anyway.
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    expect(await storedWithCondition(object)).toEqual([{ ...key(tuple), condition: last }]);
  });

  test('a genuine conflict (no later intent of the partition deletes the key) is still permanent', async () => {
    await fga.client.write({ writes: [{ ...key('user:rob viewer project:genuine'), condition: grant('2030-01-01T00:00:00Z') }] });
    const sink = sinkFor();
    const outcomes = await sink.deliver(
      [
        intent('project:genuine', { writes: [key('user:rob viewer project:genuine'), key('user:rob editor project:genuine')] }),
        // Deletes another key: does not supersede the conflicting write.
        intent('project:genuine', { deletes: [key('user:rob editor project:genuine')] }),
      ],
      noDeadline(),
    );
    expect(outcomes[0]).toMatchObject({ kind: 'permanent', error: expect.stringMatching(/^OpenFGA 409 Aborted: .*different condition/) });
    expect(outcomes[1]).toEqual({ kind: 'skipped' });
    expect(await storedWithCondition('project:genuine')).toEqual([{ ...key('user:rob viewer project:genuine'), condition: grant('2030-01-01T00:00:00Z') }]);
  });

  test('superseded writes are dropped only: the rest of the replayed intent still lands', async () => {
    const object = 'project:partial';
    const sink = sinkFor();
    const run = [
      intent(object, { writes: [{ ...key(`user:sue viewer ${object}`), condition: grant('2030-01-01T00:00:00Z') }, key(`user:sue editor ${object}`)] }),
      intent(object, { deletes: [key(`user:sue viewer ${object}`)] }),
      intent(object, withCondition(`user:sue viewer ${object}`)),
    ];
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    // Someone removed the editor tuple meanwhile: the replay of the first intent must put it back.
    await fga.client.write({ deletes: [key(`user:sue editor ${object}`)] });
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    expect((await storedWithCondition(object)).length).toBe(2);
    expect(await storedWithCondition(object)).toContainEqual({ ...key(`user:sue editor ${object}`), condition: undefined });
  });

  test('through the real drainer: outcomes lost after OpenFGA applied the run (the process died before recording them) poison nothing on the replay', async () => {
    const spec = await freshOutbox();
    const object = 'project:e2ereplay';
    const tuple = `user:tom viewer ${object}`;
    await enqueue(spec, [
      { partitionKey: object, payload: withCondition(tuple, grant('2030-01-01T00:00:00Z')) },
      { partitionKey: object, payload: { deletes: [key(tuple)] } },
      { partitionKey: object, payload: withCondition(tuple) },
    ]);
    // The sink delivers, then its outcomes are lost: the drainer counts the batch as failed.
    const real = sinkFor();
    const losing: Sink = {
      deliver: async (intents, context) => {
        await real.deliver(intents, context);
        throw new Error('the process died before recording the outcomes');
      },
    };
    const lost = createDrainer({ db: t.db, spec, sink: losing, logger: quiet, backoff: { baseMs: 0, maxMs: 0 } });
    try {
      expect(await lost.drainOnce()).toMatchObject({ delivered: 0, retried: 1, released: 2 });
    } finally {
      await lost.stop();
    }
    expect(await storedWithCondition(object)).toEqual([{ ...key(tuple), condition: undefined }]);

    const drainer = createDrainer({ db: t.db, spec, sink: sinkFor(), logger: quiet, backoff: { baseMs: 0, maxMs: 0 } });
    try {
      expect(await drainer.drainOnce()).toMatchObject({ delivered: 3, poisoned: 0 });
    } finally {
      await drainer.stop();
    }
    expect((await rows(spec)).every((row) => row.sent && row.attempt_count <= 1)).toBe(true);
    expect(await storedWithCondition(object)).toEqual([{ ...key(tuple), condition: undefined }]);
  });
});

describe('the halt error is safe to print: no secret in its cause chain', () => {
  test('a refused client-credentials exchange: util.inspect of the SinkHaltError (what console.error or a logger prints) has no secret', async () => {
    const issuer = await startRefusingTokenIssuer(401, 'invalid_client');
    try {
      const sink = createOpenFgaSink({ apiUrl: fga.apiUrl, storeId: fga.storeId, credentials: clientCredentials(issuer.url, 'the-client-secret') });
      const halted = await sink.deliver([intent('vpc:leak', { writes: [key('user:uma owner vpc:leak')] })], noDeadline()).catch((error: unknown) => error);
      expect(halted).toBeInstanceOf(SinkHaltError);
      const printed = inspect(halted, { depth: 10 });
      expect(printed).toContain('invalid_client');
      expect(printed).not.toContain('the-client-secret');
    } finally {
      await issuer.close();
    }
  });

  test('a refused API token (the real OpenFGA with a preshared key): the printed SinkHaltError has neither the token nor the Authorization header', async () => {
    const server = await startOpenFga({ presharedKey: 'the-right-key' });
    try {
      const sink = createOpenFgaSink({
        apiUrl: server.apiUrl,
        storeId: fga.storeId,
        credentials: { method: CredentialsMethod.ApiToken, config: { token: 'the-wrong-api-token' } },
      });
      const halted = await sink.deliver([intent('vpc:leak2', { writes: [key('user:uma owner vpc:leak2')] })], noDeadline()).catch((error: unknown) => error);
      expect(halted).toBeInstanceOf(SinkHaltError);
      const printed = inspect(halted, { depth: 10 });
      expect(printed).toContain('unauthenticated');
      expect(printed).not.toContain('the-wrong-api-token');
      expect(printed.toLowerCase()).not.toContain('authorization');
    } finally {
      await server.stop();
    }
  });
});

describe('failures no intent is at fault for halt the pass instead of poisoning every intent', () => {
  test('a pinned model id that the store does not have (another environment\'s): the pass halts, no row is poisoned', async () => {
    const other = await createOpenFgaStore(fga.apiUrl);
    const spec = await freshOutbox();
    await enqueue(spec, Array.from({ length: 20 }, (_, i) => ({ partitionKey: `vpc:e2emodel${i}`, payload: { writes: [key(`user:val owner vpc:e2emodel${i}`)] } })));
    const drainer = createDrainer({
      db: t.db,
      spec,
      sink: createOpenFgaSink({ apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: other.authorizationModelId }),
      logger: quiet,
    });
    try {
      expect(await drainer.drainOnce()).toMatchObject({ poisoned: 0, halted: true });
    } finally {
      await drainer.stop();
    }
    expect((await rows(spec)).every((row) => !row.sent && row.attempt_count === 0)).toBe(true);
  });

  test('a store without a model yet (the model is written after the services start): halt, nothing poisoned', async () => {
    const { store } = { store: await new OpenFgaClient({ apiUrl: fga.apiUrl }).createStore({ name: 'no-model-yet' }) };
    const sink = createOpenFgaSink({ apiUrl: fga.apiUrl, storeId: store.id });
    const halted = await sink.deliver([intent('vpc:nomodel1', { writes: [key('user:val owner vpc:nomodel1')] })], noDeadline()).catch((error: unknown) => error);
    expect(halted).toBeInstanceOf(SinkHaltError);
    expect((halted as Error).message).toContain('latest_authorization_model_not_found');
  });

  test('a 400 that is not OpenFGA\'s (an ingress answering "plain HTTP request sent to HTTPS port"): halt, not a permanent failure of every intent', async () => {
    // A stand-in for nginx on a TLS port reached over plain http (not OpenFGA: a misrouted apiUrl).
    const ingress = createServer((request, response) => {
      request.resume();
      request.on('end', () =>
        response
          .writeHead(400, { 'content-type': 'text/html' })
          .end('<html><head><title>400 The plain HTTP request was sent to HTTPS port</title></head><body></body></html>'),
      );
    });
    await new Promise<void>((resolve) => ingress.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = ingress.address() as AddressInfo;
      const sink = createOpenFgaSink({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId });
      const batch = Array.from({ length: 6 }, (_, i) => intent(`vpc:ingress${i}`, { writes: [key(`user:wes owner vpc:ingress${i}`)] }));
      const result = await sink.deliver(batch, noDeadline()).then(
        (outcomes) => kinds(outcomes),
        (error: unknown) => error,
      );
      expect(result).toBeInstanceOf(SinkHaltError);
      expect((result as Error).message).toContain('OpenFGA 400');
    } finally {
      ingress.closeAllConnections();
      await new Promise<void>((resolve) => ingress.close(() => resolve()));
    }
  });
});

describe('on the postgres datastore, the replay of a conditional write without a context', () => {
  // The test stack's shared OpenFGA uses the memory datastore, which compares these equal; a
  // production OpenFGA runs on postgres, which does not.
  const database = `fga_faults_${randomBytes(4).toString('hex')}`;
  let server: OpenFgaServer | undefined;
  beforeAll(async () => {
    server = await startOpenFga({ datastore: 'postgres', datastoreUri: await createDatabase(stackInfo().postgresUrl, database) });
  });
  afterAll(async () => {
    await server?.stop();
    await dropDatabase(stackInfo().postgresUrl, database);
  });

  test('an intent writing a tuple with a condition and no context, delivered twice (at-least-once): delivered both times', async () => {
    const { apiUrl } = server as OpenFgaServer;
    const { storeId, authorizationModelId } = await createOpenFgaStore(apiUrl);
    const sink = createOpenFgaSink({ apiUrl, storeId, authorizationModelId });
    const grantWithoutContext = intent('project:pgreplay', withCondition('user:vic viewer project:pgreplay', { name: 'non_expired_grant' }));
    expect(await sink.deliver([grantWithoutContext], noDeadline())).toEqual([{ kind: 'delivered' }]);
    expect(await sink.deliver([grantWithoutContext], noDeadline())).toEqual([{ kind: 'delivered' }]);
    // A tuple stored by an earlier sink version (sent without a context) also matches the replay.
    const reader = new OpenFgaClient({ apiUrl, storeId, authorizationModelId });
    await reader.write({ writes: [{ ...key('user:vic viewer project:pgold'), condition: { name: 'non_expired_grant' } }] });
    expect(await sink.deliver([intent('project:pgold', withCondition('user:vic viewer project:pgold', { name: 'non_expired_grant' }))], noDeadline())).toEqual([
      { kind: 'delivered' },
    ]);
    // A different condition context is still a conflict.
    expect(
      kinds(await sink.deliver([intent('project:pgreplay', withCondition('user:vic viewer project:pgreplay', grant('2030-01-01T00:00:00Z')))], noDeadline())),
    ).toEqual(['permanent']);
  });
});
