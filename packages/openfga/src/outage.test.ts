import { randomBytes } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { OpenFgaClient } from '@openfga/sdk';
import {
  createDatabase,
  createOpenFgaStore,
  dropDatabase,
  freePort,
  stackInfo,
  startOpenFga,
  useOpenFgaStore,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { stored } from '@outbox/test-stack/openfga';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { intent, kinds, noDeadline, writes } from './testing/fixtures.js';

// OpenFGA unreachable, silent or restarting: every outcome is transient (retried), never permanent.

const fga = useOpenFgaStore();
const vpcIntents = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) =>
    intent(`vpc:${prefix}${i}`, writes(`user:ann owner vpc:${prefix}${i}`, `project:p project vpc:${prefix}${i}`)),
  );

describe('transient failures', () => {
  test('nothing listening on the port: every intent transient, none permanent', async () => {
    const port = await freePort();
    const sink = createOpenFgaSink({ apiUrl: `http://127.0.0.1:${port}`, storeId: fga.storeId });
    const outcomes = await sink.deliver(
      [intent('vpc:down1', writes('user:jo owner vpc:down1')), intent('vpc:down2', writes('user:jo owner vpc:down2'))],
      noDeadline(),
    );
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
      const cut = await patient.deliver(
        [intent('vpc:slow', writes('user:kim owner vpc:slow')), intent('vpc:slow', writes('user:kim viewer vpc:slow'))],
        {
          signal: deadline.signal,
        },
      );
      expect(cut).toEqual([
        { kind: 'transient', error: 'OpenFGA: the delivery deadline passed before the Write request was answered' },
        { kind: 'skipped' },
      ]);
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => blackHole.close(() => resolve()));
    }
  });
});

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
    expect(downOutcomes[0]).toEqual({
      kind: 'transient',
      error: expect.stringMatching(/^OpenFGA unreachable: connect ECONNREFUSED/),
    });

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
