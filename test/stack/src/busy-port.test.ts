import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import type * as FreePort from './free-port.js';
import { startNativeOpenFga } from './native-openfga.js';
import { startEmbeddedPostgres } from './native-postgres.js';

// A port chosen free can be taken before the server binds it (a second test run, a client's
// ephemeral port): freePort() hands out `busy` ports first here, each held by another listener.
const busy = vi.hoisted(() => ({ ports: [] as number[] }));
vi.mock('./free-port.js', async (importOriginal) => {
  const real = await importOriginal<typeof FreePort>();
  return { freePort: async () => busy.ports.shift() ?? real.freePort() };
});

let squatter: Server;
let taken: number;
beforeAll(async () => {
  squatter = createServer((socket) => socket.destroy()); // it only holds the port
  await new Promise<void>((resolve) => squatter.listen(0, '127.0.0.1', resolve));
  taken = (squatter.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((resolve) => squatter.close(resolve));
});

test('Postgres starts on another port when the chosen one was taken meanwhile (it used to hang)', async () => {
  busy.ports.push(taken);
  const server = await startEmbeddedPostgres();
  try {
    expect(busy.ports).toEqual([]);
    expect(new URL(server.url).port).not.toBe(String(taken));
  } finally {
    await server.stop();
  }
}, 60_000);

test('OpenFGA starts on other ports when the chosen one was taken meanwhile', async () => {
  busy.ports.push(taken);
  const server = await startNativeOpenFga();
  try {
    expect(busy.ports).toEqual([]);
    expect(server.httpPort).not.toBe(taken);
    expect(await (await fetch(new URL('/healthz', server.apiUrl))).json()).toEqual({ status: 'SERVING' });
  } finally {
    await server.stop();
  }
}, 60_000);
