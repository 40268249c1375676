import { randomBytes } from 'node:crypto';
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { SinkHaltError, type Intent, type Outcome } from '@outbox/drainer';
import { createDatabase, createOpenFgaStore, dropDatabase, stackInfo, startOpenFga, type OpenFgaServer } from '@outbox/test-stack';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { OpenFgaWriteError } from './errors.js';
import { createOpenFgaSink } from './openfga-sink.js';
import { intent, key, noDeadline, stored } from './testing/fixtures.js';

const kinds = (outcomes: readonly Outcome[]) => outcomes.map((o) => o.kind);
const vpcIntents = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => intent(`vpc:${prefix}${i}`, { writes: [key(`user:ann owner vpc:${prefix}${i}`), key(`project:p project vpc:${prefix}${i}`)] }));

describe('OpenFGA stopped mid-run, then restarted on the same port', () => {
  // The postgres datastore keeps the store across the restart, so the same sink carries on.
  const database = `fga_restart_${randomBytes(4).toString('hex')}`;
  let datastoreUri = '';
  let server: OpenFgaServer | undefined;
  beforeAll(async () => {
    datastoreUri = await createDatabase(stackInfo().postgresUrl, database);
    server = await startOpenFga({ datastore: 'postgres', datastoreUri });
  });
  afterAll(async () => {
    await server?.stop();
    await dropDatabase(stackInfo().postgresUrl, database);
  });

  test('outcomes are transient while it is down, nothing permanent; after the restart everything lands', async () => {
    const first = server as OpenFgaServer;
    const { storeId, authorizationModelId } = await createOpenFgaStore(first.apiUrl);
    const sink = createOpenFgaSink({ apiUrl: first.apiUrl, storeId, authorizationModelId, timeoutMs: 2_000 });

    const before = vpcIntents('before', 20);
    expect(kinds(await sink.deliver(before, noDeadline())).every((k) => k === 'delivered')).toBe(true);

    // Stop it mid-run: one request at a time, and the stop begins once the first has landed.
    let stopping: Promise<void> | undefined;
    const serial = createOpenFgaSink({
      apiUrl: first.apiUrl,
      storeId,
      authorizationModelId,
      timeoutMs: 2_000,
      maxConcurrentRequests: 1,
      onRequest: (event) => {
        if (event.result === 'delivered') stopping ??= first.stop();
      },
    });
    const during = vpcIntents('during', 400);
    const duringOutcomes = await serial.deliver(during, noDeadline());
    await stopping;
    expect(duringOutcomes.filter((o) => o.kind === 'permanent')).toEqual([]);
    expect(duringOutcomes.every((o) => o.kind === 'delivered' || o.kind === 'transient')).toBe(true);
    expect(duringOutcomes.filter((o) => o.kind === 'delivered').length).toBeGreaterThanOrEqual(50);
    expect(duringOutcomes.filter((o) => o.kind === 'transient').length).toBeGreaterThan(0);

    // Down: every intent transient, none permanent, the reason in the error.
    const whileDown = vpcIntents('down', 30);
    const downOutcomes = await sink.deliver(whileDown, noDeadline());
    expect(kinds(downOutcomes).every((k) => k === 'transient')).toBe(true);
    expect(downOutcomes[0]).toEqual({ kind: 'transient', error: expect.stringMatching(/^OpenFGA unreachable: connect ECONNREFUSED/) });

    // Back on the same port: the drainer would retry what was not delivered, and it all lands.
    server = await startOpenFga({ datastore: 'postgres', datastoreUri, httpPort: first.httpPort });
    const retry = [...during.filter((_, i) => duringOutcomes[i]?.kind !== 'delivered'), ...whileDown];
    expect(kinds(await sink.deliver(retry, noDeadline())).every((k) => k === 'delivered')).toBe(true);
    const reader = new OpenFgaClient({ apiUrl: server.apiUrl, storeId, authorizationModelId });
    const tuples = [...before, ...during, ...whileDown].flatMap((item) => item.payload.writes ?? []);
    for (let i = 0; i < tuples.length; i += 50) {
      const found = await Promise.all(tuples.slice(i, i + 50).map((tuple) => stored(reader, tuple)));
      expect(found.every(Boolean)).toBe(true);
    }
  });
});

describe('OpenFGA with a preshared key', () => {
  let server: OpenFgaServer | undefined;
  beforeAll(async () => {
    server = await startOpenFga({ presharedKey: 'right' });
  });
  afterAll(async () => {
    await server?.stop();
  });
  const token = (value: string) => ({ method: CredentialsMethod.ApiToken as const, config: { token: value } });

  test('a wrong key halts the delivery (SinkHaltError, nothing poisoned); the right key delivers everything', async () => {
    const { apiUrl } = server as OpenFgaServer;
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
    const found = await Promise.all(batch.flatMap((item) => item.payload.writes ?? []).map((tuple) => stored(reader, tuple)));
    expect(found.every(Boolean)).toBe(true);
  });
});
