import { createServer, type Socket } from 'node:net';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { SinkHaltError, type Outcome } from '@outbox/drainer';
import type { IntentPayload } from '@outbox/outbox';
import { freePort, openFgaClientConfig, useOpenFgaStore } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { OpenFgaSinkConfigError, OpenFgaWriteError } from './errors.js';
import { createOpenFgaSink, type OpenFgaSinkOptions } from './openfga-sink.js';
import { bodyKeys, clientCredentials, intent, key, noDeadline, recordingClient, startRefusingTokenIssuer, stored, storedOn } from './testing/fixtures.js';
import type { OpenFgaWriteEvent } from './write-request.js';

const fga = useOpenFgaStore();

const sinkFor = (options: OpenFgaSinkOptions = {}) =>
  createOpenFgaSink({ ...openFgaClientConfig(fga.storeId, fga.authorizationModelId), storeId: fga.storeId, ...options });
const writes = (...keys: string[]): IntentPayload => ({ writes: keys.map(key) });
const deletes = (...keys: string[]): IntentPayload => ({ deletes: keys.map(key) });
const kinds = (outcomes: readonly Outcome[]) => outcomes.map((o) => o.kind);

describe('delivery', () => {
  test('intents land as written (read on each exact key proves it) and deletes remove them', async () => {
    const sink = sinkFor();
    const outcomes = await sink.deliver(
      [
        intent('vpc:land1', writes('project:land project vpc:land1', 'user:ann owner vpc:land1')),
        intent('vpc:land2', writes('user:bob viewer vpc:land2')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['delivered', 'delivered']);
    for (const tuple of ['project:land project vpc:land1', 'user:ann owner vpc:land1', 'user:bob viewer vpc:land2']) {
      expect(await stored(fga.client, key(tuple))).toBe(true);
    }
    expect(await stored(fga.client, key('user:bob owner vpc:land2'))).toBe(false);

    const removed = await sink.deliver([intent('vpc:land1', deletes('user:ann owner vpc:land1'))], noDeadline());
    expect(kinds(removed)).toEqual(['delivered']);
    expect(await stored(fga.client, key('user:ann owner vpc:land1'))).toBe(false);
    expect(await stored(fga.client, key('project:land project vpc:land1'))).toBe(true);
  });

  test('replaying a delivered intent and deleting a tuple that is already gone are delivered (idempotent)', async () => {
    const sink = sinkFor();
    const create = intent('vpc:replay', writes('user:cat owner vpc:replay', 'project:r project vpc:replay'));
    expect(kinds(await sink.deliver([create], noDeadline()))).toEqual(['delivered']);
    // A crash after OpenFGA accepted it but before sent_at was recorded: the drainer sends it again.
    expect(kinds(await sink.deliver([create], noDeadline()))).toEqual(['delivered']);
    expect(kinds(await sink.deliver([intent('vpc:replay', deletes('user:nobody owner vpc:replay'))], noDeadline()))).toEqual(['delivered']);
    // Mixed: one half already there, one delete already gone, in one request.
    const mixed = intent('vpc:replay', { writes: [key('user:cat owner vpc:replay'), key('user:dan viewer vpc:replay')], deletes: [key('user:gone viewer vpc:replay')] });
    expect(kinds(await sink.deliver([mixed], noDeadline()))).toEqual(['delivered']);
    expect(await storedOn(fga.client, 'vpc:replay')).toEqual(['project:r project vpc:replay', 'user:cat owner vpc:replay', 'user:dan viewer vpc:replay']);
  });

  test('an apiUrl with a trailing slash reaches the same OpenFGA (the SDK would ask for //stores, a 404 and a halt)', async () => {
    const config = openFgaClientConfig(fga.storeId, fga.authorizationModelId);
    const sink = createOpenFgaSink({ ...config, apiUrl: `${config.apiUrl}//`, storeId: fga.storeId });
    expect(kinds(await sink.deliver([intent('vpc:slash', writes('user:sal owner vpc:slash'))], noDeadline()))).toEqual(['delivered']);
    expect(await storedOn(fga.client, 'vpc:slash')).toEqual(['user:sal owner vpc:slash']);
  });

  test('250 intents of mixed sizes: few requests, none over 100 operations or naming a key twice, no intent split', async () => {
    const recorder = recordingClient(new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId)));
    const events: OpenFgaWriteEvent[] = [];
    const sink = createOpenFgaSink({ client: recorder.client, onRequest: (event) => events.push(event) });
    const batch = [];
    const expected = new Map<string, Set<string>>();
    const apply = (kind: 'write' | 'delete', tuple: string) => {
      const object = tuple.split(' ')[2] as string;
      const set = expected.get(object) ?? new Set<string>();
      if (kind === 'write') set.add(tuple);
      else set.delete(tuple);
      expected.set(object, set);
    };
    for (let i = 0; i < 250; i += 1) {
      const object = `vpc:mix${i % 200}`; // partitions 0..49 get two intents each
      const size = 1 + ((i * 7) % 8);
      const tuples = Array.from({ length: size }, (_, j) => `user:u${i}x${j} viewer ${object}`);
      if (i >= 200 && i < 210) {
        // The second intent of these partitions deletes the first intent's first tuple: a later round.
        const first = `user:u${i - 200}x0 viewer ${object}`;
        batch.push(intent(object, { writes: tuples.map(key), deletes: [key(first)] }));
        tuples.forEach((t) => apply('write', t));
        apply('delete', first);
      } else if (i >= 210 && i < 215) {
        // Five partitions write one shared tuple: never in one request, nor in two in flight at once.
        tuples.push('user:shared viewer project:mix');
        batch.push(intent(object, writes(...tuples)));
        tuples.forEach((t) => apply('write', t));
      } else {
        batch.push(intent(object, writes(...tuples)));
        tuples.forEach((t) => apply('write', t));
      }
    }
    const operations = batch.reduce((n, i) => n + (i.payload.writes?.length ?? 0) + (i.payload.deletes?.length ?? 0), 0);

    const outcomes = await sink.deliver(batch, noDeadline());

    expect(kinds(outcomes).every((k) => k === 'delivered')).toBe(true);
    const { bodies } = recorder;
    for (const body of bodies) {
      const keys = bodyKeys(body);
      expect(keys.length).toBeLessThanOrEqual(100);
      expect(new Set(keys).size).toBe(keys.length);
    }
    // Never split: each intent's operations all sit in one request, and every operation was sent once.
    for (const item of batch) {
      const own = bodyKeys({ writes: [...(item.payload.writes ?? [])], deletes: [...(item.payload.deletes ?? [])] });
      expect(bodies.some((body) => own.every((k) => bodyKeys(body).includes(k)))).toBe(true);
    }
    expect(bodies.reduce((n, body) => n + bodyKeys(body).length, 0)).toBe(operations);
    expect(bodies.filter((body) => bodyKeys(body).includes('user:shared viewer project:mix'))).toHaveLength(5);
    // Packed: the minimum is ceil(ops / 100) = 12 requests. The shared key needs five rounds (one
    // partition per round), which adds at most one request per extra round (15 observed).
    expect(bodies.length).toBeLessThanOrEqual(Math.ceil(operations / 100) + 4);
    expect(events).toHaveLength(bodies.length);
    expect(events.every((e) => e.result === 'delivered')).toBe(true);
    // And the store holds exactly what the intents, applied in order, say.
    for (const [object, tuples] of expected) expect(await storedOn(fga.client, object)).toEqual([...tuples].sort());
  });
});

describe('ordering within a partition', () => {
  test('intents on one key apply in id order: write, delete, write leaves the tuple; write, delete removes it', async () => {
    const sink = sinkFor();
    const outcomes = await sink.deliver(
      [
        intent('vpc:ord1', writes('user:eve owner vpc:ord1')),
        intent('vpc:ord2', writes('user:eve owner vpc:ord2')),
        intent('vpc:ord1', deletes('user:eve owner vpc:ord1')),
        intent('vpc:ord2', deletes('user:eve owner vpc:ord2')),
        intent('vpc:ord1', writes('user:eve owner vpc:ord1')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['delivered', 'delivered', 'delivered', 'delivered', 'delivered']);
    expect(await stored(fga.client, key('user:eve owner vpc:ord1'))).toBe(true);
    expect(await stored(fga.client, key('user:eve owner vpc:ord2'))).toBe(false);
  });

  test('after an intent fails, the later intents of its partition are skipped and not applied; other partitions go on', async () => {
    const sink = sinkFor();
    const outcomes = await sink.deliver(
      [
        intent('vpc:skip1', writes('user:fay owner nosuchtype:skip1')),
        intent('vpc:skip2', writes('user:fay owner vpc:skip2')),
        intent('vpc:skip1', writes('user:fay viewer vpc:skip1')), // disjoint: packed with its failed predecessor
        intent('vpc:skip1', writes('user:fay owner vpc:skip1')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['permanent', 'delivered', 'skipped', 'skipped']);
    expect(await stored(fga.client, key('user:fay viewer vpc:skip1'))).toBe(false);
    expect(await stored(fga.client, key('user:fay owner vpc:skip1'))).toBe(false);
    expect(await stored(fga.client, key('user:fay owner vpc:skip2'))).toBe(true);
  });
});

describe('permanent failures', () => {
  test("one intent with an unknown type among 50: only it is permanent, with OpenFGA's message; the 49 land in the same call", async () => {
    const events: OpenFgaWriteEvent[] = [];
    const sink = sinkFor({ onRequest: (event) => events.push(event) });
    const batch = Array.from({ length: 50 }, (_, i) =>
      i === 31 ? intent(`vpc:bad${i}`, writes(`user:gil owner nosuchtype:bad${i}`)) : intent(`vpc:bad${i}`, writes(`user:gil owner vpc:bad${i}`, `project:bad project vpc:bad${i}`)),
    );
    const outcomes = await sink.deliver(batch, noDeadline());
    expect(outcomes[31]).toEqual({
      kind: 'permanent',
      error: "OpenFGA 400 validation_error: Invalid tuple 'nosuchtype:bad31#owner@user:gil'. Reason: type 'nosuchtype' not found",
    });
    expect(outcomes.filter((o, i) => i !== 31 && o.kind === 'delivered')).toHaveLength(49);
    for (let i = 0; i < 50; i += 1) {
      if (i !== 31) expect(await stored(fga.client, key(`user:gil owner vpc:bad${i}`))).toBe(true);
    }
    // Bisection: one refused request of 50, then halves down to the bad one (about 2·log2(50) more).
    expect(events[0]).toMatchObject({ intents: 50, result: 'permanent', rule: 'invalid-input' });
    expect(events.length).toBeGreaterThan(2);
    expect(events.length).toBeLessThanOrEqual(13);
  });

  test('a tuple that exists with a different condition: 409, permanent, with OpenFGA\'s message', async () => {
    const condition = { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } };
    await fga.client.write({ writes: [{ ...key('user:hal viewer project:cond'), condition }] });
    const sink = sinkFor();
    const outcomes = await sink.deliver(
      [intent('project:cond', writes('user:hal viewer project:cond')), intent('project:other', writes('user:hal viewer project:other'))],
      noDeadline(),
    );
    expect(outcomes[0]).toEqual({
      kind: 'permanent',
      error:
        "OpenFGA 409 Aborted: transactional write failed due to conflict: attempted to write a tuple which already exists with a different condition: user: 'user:hal', relation: 'viewer', object: 'project:cond'",
    });
    expect(outcomes[1]).toEqual({ kind: 'delivered' });
  });

  test('a payload edited into an invalid shape fails permanently without a request; its successors are skipped', async () => {
    const events: OpenFgaWriteEvent[] = [];
    const sink = sinkFor({ onRequest: (event) => events.push(event) });
    const outcomes = await sink.deliver(
      [intent('vpc:edit', { writes: [{ user: 'user:ida', relation: 'owner' }] } as never), intent('vpc:edit', writes('user:ida owner vpc:edit'))],
      noDeadline(),
    );
    expect(outcomes[0]).toMatchObject({ kind: 'permanent', error: expect.stringMatching(/^invalid intent payload, not sent: payload\.writes\[0\]\.object/) });
    expect(outcomes[1]).toEqual({ kind: 'skipped' });
    expect(events).toEqual([]);
  });
});

describe('transient failures', () => {
  test('nothing listening on the port: every intent transient, none permanent', async () => {
    const port = await freePort();
    const sink = createOpenFgaSink({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId });
    const outcomes = await sink.deliver([intent('vpc:down1', writes('user:jo owner vpc:down1')), intent('vpc:down2', writes('user:jo owner vpc:down2'))], noDeadline());
    expect(outcomes).toEqual([
      { kind: 'transient', error: `OpenFGA unreachable: connect ECONNREFUSED 127.0.0.1:${port}` },
      { kind: 'transient', error: `OpenFGA unreachable: connect ECONNREFUSED 127.0.0.1:${port}` },
    ]);
  });

  test('a server that accepts and never answers: transient after timeoutMs, and at once when the deadline aborts', async () => {
    const sockets = new Set<Socket>();
    const blackHole = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
    const { port } = blackHole.address() as { port: number };
    try {
      const apiUrl = `http://127.0.0.1:${port}`;
      const timed = createOpenFgaSink({ apiUrl, storeId: fga.storeId, timeoutMs: 300 });
      let started = performance.now();
      const outcomes = await timed.deliver([intent('vpc:slow', writes('user:kim owner vpc:slow'))], noDeadline());
      expect(outcomes).toEqual([{ kind: 'transient', error: 'OpenFGA: no answer to the Write request within 300 ms' }]);
      expect(performance.now() - started).toBeLessThan(2_000);

      const patient = createOpenFgaSink({ apiUrl, storeId: fga.storeId, timeoutMs: 60_000 });
      const deadline = new AbortController();
      setTimeout(() => deadline.abort(new Error('deadline')), 200);
      started = performance.now();
      const cut = await patient.deliver([intent('vpc:slow', writes('user:kim owner vpc:slow')), intent('vpc:slow', writes('user:kim viewer vpc:slow'))], {
        signal: deadline.signal,
      });
      expect(cut).toEqual([{ kind: 'transient', error: 'OpenFGA: the delivery deadline passed before the Write request was answered' }, { kind: 'skipped' }]);
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => blackHole.close(() => resolve()));
    }
  });
});

describe('halts', () => {
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
        const batch = Array.from({ length: 8 }, (_, i) => intent(`vpc:tok${code}${i}`, writes(`user:lee owner vpc:tok${code}${i}`)));
        const halted = await sink.deliver(batch, noDeadline()).then(
          () => undefined,
          (error: unknown) => error,
        );

        expect(halted).toBeInstanceOf(SinkHaltError);
        const halt = halted as SinkHaltError;
        expect(halt.message).toMatch(/^The token issuer refused the sink's client credentials/);
        expect(halt.message).toContain(`OpenFGA token exchange refused by the token issuer ${issuer.url}/oauth/token ${status} ${code}`);
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
        expect(await stored(fga.client, key(`user:lee owner vpc:tok${code}0`))).toBe(false);
      } finally {
        await issuer.close();
      }
    },
  );
});

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
    ['maxConcurrentRequests', { maxConcurrentRequests: 1_000 }],
    ['client', { client: {} }],
    ['onRequest', { onRequest: 'yes' }],
  ])('a bad %s is an OpenFgaSinkConfigError naming it', (field, override) => {
    const config = { ...(field.startsWith('max') || field === 'timeoutMs' || field === 'onRequest' ? base() : {}), ...override };
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
    expect(() => createOpenFgaSink({ client: fga.client, authorizationModelId: fga.authorizationModelId })).toThrow(OpenFgaSinkConfigError);
    // @ts-expect-error credentials are set on the client, not next to it
    expect(() => createOpenFgaSink({ client: fga.client, credentials: { method: CredentialsMethod.None } })).toThrow(OpenFgaSinkConfigError);
  });

  test('a client without a store is refused; defaults are reported', () => {
    expect(() => createOpenFgaSink({ client: new OpenFgaClient({ apiUrl: fga.apiUrl }) })).toThrow(OpenFgaSinkConfigError);
    const sink = createOpenFgaSink({ client: fga.client });
    expect({ max: sink.maxTuplesPerWrite, timeout: sink.timeoutMs, concurrency: sink.maxConcurrentRequests }).toEqual({ max: 100, timeout: 10_000, concurrency: 4 });
  });
});
