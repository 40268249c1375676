import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { SinkHaltError } from '@outbox/drainer';
import { createOpenFgaStore, openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { storedOn } from '@outbox/test-stack/openfga';
import { describe, expect, test } from 'vitest';
import { OpenFgaSinkConfigError } from './errors.js';
import { createOpenFgaSink } from './openfga-sink.js';
import { drainOnce, intent, kinds, noDeadline, outboxTables, writes } from './testing/fixtures.js';

// A misconfigured sink is refused when it is built, naming the field, or halts at its first pass
// (no intent is at fault): it never poisons a row.

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

describe('configuration', () => {
  const base = () => ({ apiUrl: fga.apiUrl, storeId: fga.storeId });
  test.each([
    ['apiUrl', { storeId: 'x' }],
    ['apiUrl', { apiUrl: 'localhost:8080', storeId: 'x' }],
    ['apiUrl', { apiUrl: 'ftp://openfga', storeId: 'x' }],
    ['storeId', { apiUrl: 'http://openfga:8080', storeId: '' }],
    ['authorizationModelId', { apiUrl: 'http://openfga:8080', storeId: 'x', authorizationModelId: '' }],
    ['maxTuplesPerWrite', { maxTuplesPerWrite: 0 }],
    ['maxTuplesPerWrite', { maxTuplesPerWrite: 2.5 }],
    ['timeoutMs', { timeoutMs: -1 }],
    ['serverRequestTimeoutMs', { serverRequestTimeoutMs: 0 }],
    ['maxConcurrentRequests', { maxConcurrentRequests: 1_000 }],
    ['client', { client: {} }],
    ['onRequest', { onRequest: 'yes' }],
  ])('a bad %s is an OpenFgaSinkConfigError naming it', (field, override) => {
    const config = {
      ...(field.startsWith('max') || field.endsWith('imeoutMs') || field === 'onRequest' ? base() : {}),
      ...override,
    };
    let thrown: unknown;
    try {
      createOpenFgaSink(config as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(OpenFgaSinkConfigError);
    expect((thrown as OpenFgaSinkConfigError).field).toBe(field);
    expect((thrown as Error).message).toMatch(new RegExp(`^${field}: `));
  });

  test.each([
    ['authorizationModelId', { authorizationModelId: '01ARZ3NDEKTSV4RRFFQ69G5FAV' }],
    ['credentials', { credentials: { method: CredentialsMethod.ApiToken, config: { token: 'secret' } } }],
    ['apiUrl', { apiUrl: 'http://openfga:8080' }],
    ['storeId', { storeId: '01ARZ3NDEKTSV4RRFFQ69G5FAV' }],
  ])('%s next to a client is refused (it would be ignored), naming it', (field, extra) => {
    let thrown: unknown;
    try {
      createOpenFgaSink({ client: fga.client, ...extra } as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(OpenFgaSinkConfigError);
    expect((thrown as OpenFgaSinkConfigError).field).toBe('client');
    expect((thrown as Error).message).toContain(`not both: ${field} would be ignored (set it on the client)`);
    expect((thrown as Error).message).not.toContain('secret');
  });

  test('connection fields next to a client do not compile either', () => {
    // @ts-expect-error the model is pinned on the client, not next to it
    expect(() => createOpenFgaSink({ client: fga.client, authorizationModelId: fga.authorizationModelId })).toThrow(
      OpenFgaSinkConfigError,
    );
    // @ts-expect-error credentials are set on the client, not next to it
    expect(() => createOpenFgaSink({ client: fga.client, credentials: { method: CredentialsMethod.None } })).toThrow(
      OpenFgaSinkConfigError,
    );
  });

  test('a client without a store is refused; defaults are reported', () => {
    expect(() => createOpenFgaSink({ client: new OpenFgaClient({ apiUrl: fga.apiUrl }) })).toThrow(
      OpenFgaSinkConfigError,
    );
    const sink = createOpenFgaSink({ client: fga.client });
    expect({ max: sink.maxTuplesPerWrite, timeout: sink.timeoutMs, concurrency: sink.maxConcurrentRequests }).toEqual({
      max: 100,
      timeout: 10_000,
      concurrency: 4,
    });
  });

  test("a Write lives the sink's timeout plus OpenFGA's request timeout; a client that cannot read leaves readTuples (and the late-write check) off", () => {
    const sink = createOpenFgaSink({ client: fga.client, timeoutMs: 2_000, serverRequestTimeoutMs: 5_000 });
    expect(sink.writeLifetimeMs).toBe(7_000);
    expect(createOpenFgaSink({ client: fga.client }).writeLifetimeMs).toBe(13_000);
    expect(typeof sink.readTuples).toBe('function');
    const writeOnly = createOpenFgaSink({ client: { write: (body, options) => fga.client.write(body, options) } });
    expect(writeOnly.readTuples).toBeUndefined();
  });
});

describe('the endpoint', () => {
  test('an apiUrl with a trailing slash reaches the same OpenFGA (the SDK would ask for //stores, a 404 and a halt)', async () => {
    const config = openFgaClientConfig(fga.storeId, fga.authorizationModelId);
    const sink = createOpenFgaSink({ ...config, apiUrl: `${config.apiUrl}//`, storeId: fga.storeId });
    expect(kinds(await sink.deliver([intent('vpc:slash', writes('user:sal owner vpc:slash'))], noDeadline()))).toEqual([
      'delivered',
    ]);
    expect(await storedOn(fga.client, 'vpc:slash')).toEqual(['user:sal owner vpc:slash']);
  });
});

describe('failures no intent is at fault for halt the pass instead of poisoning every intent', () => {
  test("a pinned model id that the store does not have (another environment's): the pass halts, no row is poisoned", async () => {
    const other = await createOpenFgaStore(fga.apiUrl);
    const spec = await outbox.fresh();
    await outbox.enqueue(
      spec,
      Array.from({ length: 20 }, (_, i) => ({
        partitionKey: `vpc:e2emodel${i}`,
        payload: writes(`user:val owner vpc:e2emodel${i}`),
      })),
    );
    const sink = createOpenFgaSink({
      apiUrl: fga.apiUrl,
      storeId: fga.storeId,
      authorizationModelId: other.authorizationModelId,
    });
    expect(await drainOnce(t, spec, sink)).toMatchObject({ poisoned: 0, halted: true });
    expect((await outbox.rows(spec)).every((row) => !row.sent && row.attempt_count === 0)).toBe(true);
  });

  test('a store without a model yet (the model is written after the services start): halt, nothing poisoned', async () => {
    const { store } = { store: await new OpenFgaClient({ apiUrl: fga.apiUrl }).createStore({ name: 'no-model-yet' }) };
    const sink = createOpenFgaSink({ apiUrl: fga.apiUrl, storeId: store.id });
    const halted = await sink
      .deliver([intent('vpc:nomodel1', writes('user:val owner vpc:nomodel1'))], noDeadline())
      .catch((error: unknown) => error);
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
          .end(
            '<html><head><title>400 The plain HTTP request was sent to HTTPS port</title></head><body></body></html>',
          ),
      );
    });
    await new Promise<void>((resolve) => ingress.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = ingress.address() as AddressInfo;
      const sink = createOpenFgaSink({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId });
      const batch = Array.from({ length: 6 }, (_, i) =>
        intent(`vpc:ingress${i}`, writes(`user:wes owner vpc:ingress${i}`)),
      );
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
