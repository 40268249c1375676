import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CredentialsMethod, type ClientWriteRequest, type OpenFgaClient } from '@openfga/sdk';
import type { Intent, SinkContext } from '@outbox/drainer';
import type { IntentPayload, TupleKey } from '@outbox/outbox';
import type { OpenFgaWriteClient, WriteOptions } from '../write-request.js';

// Test-only helpers (not exported from the package).

let nextId = 0;

/** An intent as the drainer hands it over, with an increasing id. */
export function intent(partitionKey: string, payload: IntentPayload): Intent {
  nextId += 1;
  return { id: String(nextId), partitionKey, payload, attemptCount: 0 };
}

/** `user relation object` → a tuple key. */
export function key(text: string): TupleKey {
  const [user, relation, object] = text.split(' ') as [string, string, string];
  return { user, relation, object };
}

/** A context whose signal never aborts. */
export const noDeadline = (): SinkContext => ({ signal: new AbortController().signal });

/** Whether the exact tuple is stored (a `check` could be true through inheritance; `read` is not). */
export async function stored(client: OpenFgaClient, tuple: TupleKey): Promise<boolean> {
  const { tuples } = await client.read({ user: tuple.user, relation: tuple.relation, object: tuple.object });
  return tuples.length === 1;
}

/** Every tuple stored on `object`, as "user relation object" lines, sorted. */
export async function storedOn(client: OpenFgaClient, object: string): Promise<string[]> {
  const lines: string[] = [];
  let continuationToken: string | undefined;
  do {
    const page = await client.read({ object }, { pageSize: 100, ...(continuationToken ? { continuationToken } : {}) });
    for (const t of page.tuples) lines.push(`${t.key.user} ${t.key.relation} ${t.key.object}`);
    continuationToken = page.continuation_token || undefined;
  } while (continuationToken);
  return lines.sort();
}

/** Wraps a real client and records every Write body it passes on (the server still gets them all). */
export function recordingClient(client: OpenFgaClient): { client: OpenFgaWriteClient; bodies: ClientWriteRequest[] } {
  const bodies: ClientWriteRequest[] = [];
  return {
    bodies,
    client: {
      write: (body: ClientWriteRequest, options?: WriteOptions) => {
        bodies.push(body);
        return client.write(body, options);
      },
    },
  };
}

/** Tuple-key ids of every operation in a Write body. */
export function bodyKeys(body: ClientWriteRequest): string[] {
  return [...(body.writes ?? []), ...(body.deletes ?? [])].map((k) => `${k.user} ${k.relation} ${k.object}`);
}

/**
 * A stand-in OAuth token issuer (not OpenFGA) that refuses every client-credentials exchange the
 * way RFC 6749 §5.2 says: `status` with `{ "error": code }`. It records each request's form body.
 */
export async function startRefusingTokenIssuer(
  status: number,
  code: string,
): Promise<{ url: string; requests: Array<{ path: string; form: URLSearchParams }>; close(): Promise<void> }> {
  const requests: Array<{ path: string; form: URLSearchParams }> = [];
  const server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      requests.push({ path: request.url ?? '', form: new URLSearchParams(body) });
      response.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify({ error: code }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Client-credentials settings for `@openfga/sdk` that exchange `secret` at `issuer`. */
export const clientCredentials = (issuer: string, secret: string) => ({
  method: CredentialsMethod.ClientCredentials as const,
  config: { clientId: 'outbox-drainer', clientSecret: secret, apiTokenIssuer: issuer, apiAudience: 'https://openfga.example/' },
});
