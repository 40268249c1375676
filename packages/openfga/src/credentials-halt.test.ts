import { inspect } from 'node:util';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { SinkHaltError, type Intent, type Sink } from '@outbox/drainer';
import type { OutboxSpec } from '@outbox/outbox';
import {
  createOpenFgaStore,
  startOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { clientCredentials, startRefusingTokenIssuer, stored, tupleKey } from '@outbox/test-stack/openfga';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { OpenFgaWriteError } from './errors.js';
import { createOpenFgaSink } from './openfga-sink.js';
import { drainOnce, intent, kinds, noDeadline, outboxTables, writes } from './testing/fixtures.js';
import type { OpenFgaWriteEvent } from './write-request.js';

// A credentials fault is no intent's: the pass halts (SinkHaltError), nothing is poisoned, and
// what it prints carries no secret.

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);
const token = (value: string) => ({ method: CredentialsMethod.ApiToken as const, config: { token: value } });
const vpcIntents = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) =>
    intent(`vpc:${prefix}${i}`, writes(`user:ann owner vpc:${prefix}${i}`, `project:p project vpc:${prefix}${i}`)),
  );

/** An OpenFGA of this file's own that requires the preshared key `right`. */
let secured: OpenFgaServer | undefined;
beforeAll(async () => {
  secured = await startOpenFga({ presharedKey: 'right' });
});
afterAll(async () => {
  await secured?.stop();
});

/** One pass with a sink whose credentials are refused: it halts, and every row is left as it was (no attempt, no error). */
async function expectHaltUntouched(spec: OutboxSpec, sink: Sink): Promise<void> {
  expect(await drainOnce(t, spec, sink)).toMatchObject({ delivered: 0, retried: 0, poisoned: 0, halted: true });
  expect(
    (await outbox.rows(spec)).every((row) => !row.sent && row.attempt_count === 0 && row.last_error === null),
  ).toBe(true);
}

describe('a token issuer refusing the client credentials', () => {
  // A token issuer is not OpenFGA: a local stand-in answers as RFC 6749 §5.2 says. The sink is real
  // and points at the real OpenFGA, which it never reaches: the SDK exchanges the secret first.
  test.each([
    [400, 'unauthorized_client'],
    [400, 'invalid_grant'],
    [401, 'invalid_client'],
  ])(
    'client credentials refused by the token issuer (%i %s): SinkHaltError naming the token exchange, nothing poisoned, the issuer asked once (no bisecting)',
    async (status, code) => {
      const issuer = await startRefusingTokenIssuer(status, code);
      try {
        const events: OpenFgaWriteEvent[] = [];
        const sink = createOpenFgaSink({
          apiUrl: fga.apiUrl,
          storeId: fga.storeId,
          authorizationModelId: fga.authorizationModelId,
          credentials: clientCredentials(issuer.url, 'the-client-secret'),
          onRequest: (event) => events.push(event),
        });
        const batch = Array.from({ length: 8 }, (_, i) =>
          intent(`vpc:tok${code}${i}`, writes(`user:lee owner vpc:tok${code}${i}`)),
        );
        const halted = await sink.deliver(batch, noDeadline()).then(
          () => undefined,
          (error: unknown) => error,
        );

        expect(halted).toBeInstanceOf(SinkHaltError);
        const halt = halted as SinkHaltError;
        expect(halt.message).toMatch(/^The token issuer refused the sink's client credentials/);
        expect(halt.message).toContain(
          `OpenFGA token exchange refused by the token issuer ${issuer.url}/oauth/token ${status} ${code}`,
        );
        expect(halt.message).not.toMatch(/OpenFGA \d{3}/);
        expect(halt.message).not.toContain('the-client-secret');
        expect(halt.cause).toBeInstanceOf(OpenFgaWriteError);
        expect(halt.cause).toMatchObject({ status, code, tokenIssuer: `${issuer.url}/oauth/token` });
        expect(JSON.stringify(halt.cause)).not.toContain('the-client-secret');
        // One Write request, one token exchange: a refusal is not bisected (each half would ask again).
        expect(events).toEqual([expect.objectContaining({ intents: 8, result: 'halt', rule: 'token-exchange' })]);
        expect(issuer.requests).toHaveLength(1);
        expect(issuer.requests[0]?.path).toBe('/oauth/token');
        expect(issuer.requests[0]?.form.get('grant_type')).toBe('client_credentials');
        expect(await stored(fga.client, tupleKey(`user:lee owner vpc:tok${code}0`))).toBe(false);
      } finally {
        await issuer.close();
      }
    },
  );

  test('client credentials refused by the token issuer (400 unauthorized_client): the pass halts, rows are released untouched, the issuer asked once', async () => {
    const issuer = await startRefusingTokenIssuer(400, 'unauthorized_client');
    try {
      const spec = await outbox.fresh();
      await outbox.enqueue(
        spec,
        Array.from({ length: 30 }, (_, i) => ({
          partitionKey: `vpc:e2etok${i}`,
          payload: writes(`user:di owner vpc:e2etok${i}`),
        })),
      );
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
});

describe('OpenFGA with a preshared key', () => {
  test('a wrong key halts the delivery (SinkHaltError, nothing poisoned); the right key delivers everything', async () => {
    const { apiUrl } = secured as OpenFgaServer;
    const { storeId, authorizationModelId } = await createOpenFgaStore(apiUrl, { presharedKey: 'right' });
    const batch: Intent[] = vpcIntents('psk', 150); // several requests in flight when the refusal comes

    const wrong = createOpenFgaSink({ apiUrl, storeId, authorizationModelId, credentials: token('wrong-secret') });
    const halted = await wrong.deliver(batch, noDeadline()).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(halted).toBeInstanceOf(SinkHaltError);
    const halt = halted as SinkHaltError;
    expect(halt.message).toMatch(/^OpenFGA refused the sink's credentials/);
    expect(halt.message).toContain('OpenFGA 401 unauthenticated');
    expect(halt.message).not.toContain('wrong-secret');
    expect(halt.cause).toBeInstanceOf(OpenFgaWriteError);
    expect(halt.cause).toMatchObject({ status: 401, code: 'unauthenticated' });

    const right = createOpenFgaSink({ apiUrl, storeId, authorizationModelId, credentials: token('right') });
    expect(kinds(await right.deliver(batch, noDeadline())).every((k) => k === 'delivered')).toBe(true);
    const reader = new OpenFgaClient({ apiUrl, storeId, credentials: token('right') });
    const found = await Promise.all(
      batch.flatMap((item) => item.payload.writes ?? []).map((tuple) => stored(reader, tuple)),
    );
    expect(found.every(Boolean)).toBe(true);
  });

  test('credentials refused: the pass halts, rows are released untouched (no attempt, no error); the right key sends them', async () => {
    const server = secured as OpenFgaServer;
    const { storeId, authorizationModelId } = await createOpenFgaStore(server.apiUrl, { presharedKey: 'right' });
    const spec = await outbox.fresh();
    await outbox.enqueue(
      spec,
      Array.from({ length: 30 }, (_, i) => ({
        partitionKey: `vpc:e2ekey${i}`,
        payload: writes(`user:di owner vpc:e2ekey${i}`),
      })),
    );

    await expectHaltUntouched(
      spec,
      createOpenFgaSink({ apiUrl: server.apiUrl, storeId, authorizationModelId, credentials: token('wrong') }),
    );

    const accepted = createOpenFgaSink({
      apiUrl: server.apiUrl,
      storeId,
      authorizationModelId,
      credentials: token('right'),
    });
    expect(await drainOnce(t, spec, accepted)).toMatchObject({ delivered: 30, poisoned: 0, halted: false });
    const reader = new OpenFgaClient({ apiUrl: server.apiUrl, storeId, credentials: token('right') });
    expect(await stored(reader, tupleKey('user:di owner vpc:e2ekey29'))).toBe(true);
  });
});

describe('the halt error is safe to print: no secret in its cause chain', () => {
  test('a refused client-credentials exchange: util.inspect of the SinkHaltError (what console.error or a logger prints) has no secret', async () => {
    const issuer = await startRefusingTokenIssuer(401, 'invalid_client');
    try {
      const sink = createOpenFgaSink({
        apiUrl: fga.apiUrl,
        storeId: fga.storeId,
        credentials: clientCredentials(issuer.url, 'the-client-secret'),
      });
      const halted = await sink
        .deliver([intent('vpc:leak', writes('user:uma owner vpc:leak'))], noDeadline())
        .catch((error: unknown) => error);
      expect(halted).toBeInstanceOf(SinkHaltError);
      const printed = inspect(halted, { depth: 10 });
      expect(printed).toContain('invalid_client');
      expect(printed).not.toContain('the-client-secret');
    } finally {
      await issuer.close();
    }
  });

  test('a refused API token (the real OpenFGA with a preshared key): the printed SinkHaltError has neither the token nor the Authorization header', async () => {
    const server = secured as OpenFgaServer;
    const sink = createOpenFgaSink({
      apiUrl: server.apiUrl,
      storeId: fga.storeId,
      credentials: { method: CredentialsMethod.ApiToken, config: { token: 'the-wrong-api-token' } },
    });
    const halted = await sink
      .deliver([intent('vpc:leak2', writes('user:uma owner vpc:leak2'))], noDeadline())
      .catch((error: unknown) => error);
    expect(halted).toBeInstanceOf(SinkHaltError);
    const printed = inspect(halted, { depth: 10 });
    expect(printed).toContain('unauthenticated');
    expect(printed).not.toContain('the-wrong-api-token');
    expect(printed.toLowerCase()).not.toContain('authorization');
  });
});
