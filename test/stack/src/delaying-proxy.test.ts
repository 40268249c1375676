import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer as createHttpServer } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, expect, test } from 'vitest';
import { startDelayingProxy, type DelayingProxy, type DelayingProxyEvent } from './delaying-proxy.js';

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function listening(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => server.close(resolve)));
  return (server.address() as { port: number }).port;
}

/** A TCP upstream that answers every chunk with `${tag}:` and the chunk; it also tracks its open sockets. */
async function echo(tag: string): Promise<{ port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    socket.on('data', (chunk) => socket.write(Buffer.concat([Buffer.from(`${tag}:`), chunk])));
  });
  closers.push(async () => {
    for (const socket of sockets) socket.destroy();
  });
  return { port: await listening(server), sockets };
}

/** Resolves when `socket` closes (events.once would reject on the reset that may come first). */
const closed = (socket: Socket) => new Promise<void>((resolve) => socket.once('close', () => resolve()));

async function proxyTo(port: number, onEvent?: (event: DelayingProxyEvent) => void): Promise<DelayingProxy> {
  const proxy = await startDelayingProxy({ upstream: { host: '127.0.0.1', port }, onEvent });
  closers.push(() => proxy.close());
  return proxy;
}

async function dial(proxy: DelayingProxy): Promise<Socket> {
  const socket = connect({ host: proxy.host, port: proxy.port });
  socket.on('error', () => undefined); // a reset shows as 'close', which the tests look at
  await once(socket, 'connect');
  closers.push(async () => socket.destroy());
  return socket;
}

/** Writes `text` and resolves with what comes back once `expected` bytes arrived, and how long it took. */
async function roundTrip(socket: Socket, text: string, expected: number): Promise<{ reply: string; ms: number }> {
  const started = performance.now();
  let reply = '';
  const done = new Promise<void>((resolve) => {
    const onData = (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.length >= expected) {
        socket.off('data', onData);
        resolve();
      }
    };
    socket.on('data', onData);
  });
  socket.write(text);
  await done;
  return { reply, ms: performance.now() - started };
}

test('passes bytes through both ways, and counts each request of a keep-alive connection once', async () => {
  const upstream = await echo('up');
  const proxy = await proxyTo(upstream.port);
  const socket = await dial(proxy);
  const big = randomBytes(48 * 1024).toString('hex'); // many TCP segments, one request
  const first = await roundTrip(socket, big, big.length + 3);
  expect(first.reply.replaceAll('up:', '')).toBe(big);
  const second = await roundTrip(socket, 'ping', 7);
  expect(second.reply).toBe('up:ping');
  expect(proxy.stats()).toMatchObject({ connections: 1, requests: 2, held: 0 });
});

test('a held request reaches the upstream D ms later although its client was destroyed at D/2, and its answer is recorded', async () => {
  const D = 600;
  const arrivals: Array<{ at: number; body: string }> = [];
  const upstream = createHttpServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      arrivals.push({ at: Date.now(), body });
      response.writeHead(200, { 'content-type': 'text/plain' }).end('written');
    });
  });
  const port = await listening(upstream);
  closers.push(async () => upstream.closeAllConnections());
  const events: DelayingProxyEvent[] = [];
  const proxy = await proxyTo(port, (event) => events.push(event));
  proxy.holdRequests(1, D);

  const client = await dial(proxy);
  const body = JSON.stringify({ writes: [{ user: 'user:alice', relation: 'owner', object: 'vpc:1' }] });
  const sentAt = Date.now();
  client.write(
    `POST /stores/s/write HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
  );
  await sleep(D / 2);
  client.destroy();
  expect(arrivals).toEqual([]); // not before D, whatever the client did

  for (let i = 0; i < 100 && !events.some((e) => e.type === 'answered'); i += 1) await sleep(20);
  expect(arrivals).toHaveLength(1);
  expect(arrivals[0]?.body).toBe(body);
  expect(arrivals[0]!.at - sentAt).toBeGreaterThanOrEqual(D - 5); // timers may fire a few ms early
  const [held] = proxy.heldRequests();
  expect(held).toMatchObject({ clientGone: true, response: 'HTTP/1.1 200 OK' });
  expect(held?.bytes.toString()).toContain(body);
  expect(events.map((e) => e.type)).toEqual(['held', 'released', 'answered']);
  expect(proxy.stats()).toMatchObject({ held: 1, releasedAfterClientGone: 1, answeredAfterClientGone: 1 });
});

test('retargeting sends new connections to the new upstream; open ones keep theirs', async () => {
  const a = await echo('a');
  const b = await echo('b');
  const proxy = await proxyTo(a.port);
  const before = await dial(proxy);
  expect((await roundTrip(before, 'x', 3)).reply).toBe('a:x');

  proxy.setUpstream({ host: '127.0.0.1', port: b.port });
  expect(proxy.upstream.port).toBe(b.port);
  const after = await dial(proxy);
  expect((await roundTrip(after, 'y', 3)).reply).toBe('b:y');
  expect((await roundTrip(before, 'z', 3)).reply).toBe('a:z');
});

test('a connection to a stopped upstream is ended, as it would be without the proxy', async () => {
  const gone = createServer();
  const port = await listening(gone);
  await new Promise((resolve) => gone.close(resolve));
  const proxy = await proxyTo(port);
  const socket = await dial(proxy);
  await closed(socket);
});

test('holds the bytes of new connections, delays answers, and pause() stops everything until resume()', async () => {
  const upstream = await echo('up');
  const proxy = await proxyTo(upstream.port);

  proxy.holdNewConnections(300);
  const held = await dial(proxy);
  proxy.holdNewConnections(0);
  const free = await dial(proxy);
  expect((await roundTrip(free, 'f', 4)).ms).toBeLessThan(250);
  expect((await roundTrip(held, 'h', 4)).ms).toBeGreaterThanOrEqual(250);

  proxy.delayResponses(300);
  expect((await roundTrip(free, 'd', 4)).ms).toBeGreaterThanOrEqual(295);
  proxy.delayResponses(0);

  proxy.pause();
  const paused = roundTrip(free, 'p', 4);
  const waited = await Promise.race([paused.then(() => 'answered'), sleep(300).then(() => 'still paused')]);
  expect(waited).toBe('still paused');
  proxy.resume();
  expect((await paused).reply).toBe('up:p');
});

test('close() ends every socket on both sides', async () => {
  const upstream = await echo('up');
  const proxy = await startDelayingProxy({ upstream: { host: '127.0.0.1', port: upstream.port } });
  const socket = await dial(proxy);
  await roundTrip(socket, 'x', 4);
  expect(upstream.sockets.size).toBe(1);
  proxy.holdRequests(1, 60_000);
  socket.write('never forwarded');
  const ended = closed(socket);
  await proxy.close();
  await ended;
  for (let i = 0; i < 50 && upstream.sockets.size > 0; i += 1) await sleep(10);
  expect(upstream.sockets.size).toBe(0);
  await proxy.close(); // twice is fine
});
