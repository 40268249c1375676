// An HTTP proxy in front of OpenFGA that notes when each Write was in flight and which tuples it
// carried, so a run can count overlapping requests: two Writes of one tuple in flight at once is a
// partition delivered twice concurrently (the fence of docs/agreement.md forbids it).
import { Agent, createServer, request, type IncomingHttpHeaders } from 'node:http';
import { once } from 'node:events';

/** One Write as it passed: from its last byte received to the upstream's last byte of answer (or failure). */
export interface RecordedWrite {
  readonly start: number;
  readonly end: number;
  /** `user relation object` of every tuple it writes or deletes. */
  readonly tuples: readonly string[];
}

/** A running recorder: see {@link startWriteRecorder}. */
export interface WriteRecorder {
  readonly port: number;
  /** The Writes answered so far, and those still in flight (ending now). */
  writes(): readonly RecordedWrite[];
  close(): Promise<void>;
}

interface TupleKey {
  readonly user?: string;
  readonly relation?: string;
  readonly object?: string;
}

/** The tuples of a Write body, or none for a body that is not one. */
export function writeTuples(body: string): string[] {
  let parsed: { writes?: { tuple_keys?: TupleKey[] }; deletes?: { tuple_keys?: TupleKey[] } };
  try {
    parsed = JSON.parse(body) as typeof parsed;
  } catch {
    return [];
  }
  return [...(parsed.writes?.tuple_keys ?? []), ...(parsed.deletes?.tuple_keys ?? [])].map(
    (t) => `${t.user} ${t.relation} ${t.object}`,
  );
}

/**
 * How many Writes started while an earlier Write carrying one of the same tuples was still in
 * flight (each such Write counted once).
 */
export function overlappingWrites(writes: readonly RecordedWrite[]): number {
  const lastEnd = new Map<string, number>();
  let overlapping = 0;
  for (const write of [...writes].sort((a, b) => a.start - b.start)) {
    if (write.tuples.some((tuple) => (lastEnd.get(tuple) ?? -Infinity) > write.start)) overlapping += 1;
    for (const tuple of write.tuples) lastEnd.set(tuple, Math.max(lastEnd.get(tuple) ?? -Infinity, write.end));
  }
  return overlapping;
}

const WRITE_PATH = /^\/stores\/[^/]+\/write$/;

/**
 * Listens on `listen` and forwards every request to `upstream`. A client that goes away does not
 * cancel its request upstream (as a load balancer would not): its Write ends when the upstream answers.
 */
export async function startWriteRecorder(
  listen: { readonly host: string; readonly port: number },
  upstream: { readonly host: string; readonly port: number },
): Promise<WriteRecorder> {
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const done: RecordedWrite[] = [];
  const inFlight = new Set<{ start: number; tuples: string[] }>();
  const server = createServer((incoming, outgoing) => {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks);
      const isWrite = incoming.method === 'POST' && WRITE_PATH.test((incoming.url ?? '').split('?')[0] ?? '');
      const flight = isWrite ? { start: performance.now(), tuples: writeTuples(body.toString('utf8')) } : undefined;
      if (flight) inFlight.add(flight);
      let ended = false;
      const finish = () => {
        if (!flight || ended) return;
        ended = true;
        inFlight.delete(flight);
        done.push({ ...flight, end: performance.now() });
      };
      const headers: IncomingHttpHeaders = { ...incoming.headers, 'content-length': String(body.length) };
      const forwarded = request(
        { host: upstream.host, port: upstream.port, method: incoming.method, path: incoming.url, headers, agent },
        (answer) => {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.on('data', (chunk: Buffer) => outgoing.write(chunk));
          answer.on('end', () => {
            finish();
            outgoing.end();
          });
          answer.on('error', () => {
            finish();
            outgoing.destroy();
          });
        },
      );
      forwarded.on('error', () => {
        finish();
        if (!outgoing.headersSent) outgoing.writeHead(502, { 'content-type': 'application/json' });
        outgoing.end('{"code":"proxy_upstream_error"}');
      });
      forwarded.end(body);
    });
    outgoing.on('error', () => {});
  });
  server.listen(listen.port, listen.host);
  await once(server, 'listening');
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : listen.port,
    writes: () => [...done, ...[...inFlight].map((f) => ({ ...f, end: performance.now() }))],
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      agent.destroy();
      await closed;
    },
  };
}
