import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CredentialsMethod } from '@openfga/sdk';

/** A running {@link startRefusingTokenIssuer}. */
export interface RefusingTokenIssuer {
  /** Its base URL, e.g. `http://127.0.0.1:41234` (the SDK asks `<url>/oauth/token`). */
  readonly url: string;
  /** Every exchange it was asked for, in order, with its form body. */
  readonly requests: Array<{ path: string; form: URLSearchParams }>;
  close(): Promise<void>;
}

/**
 * A stand-in OAuth token issuer (not OpenFGA) on loopback that refuses every client-credentials
 * exchange as RFC 6749 §5.2 says: `status` with `{ "error": code }`.
 *
 * @example
 * const issuer = await startRefusingTokenIssuer(401, 'invalid_client');
 * const client = new OpenFgaClient({ apiUrl, storeId, credentials: clientCredentials(issuer.url, 'secret') });
 * await issuer.close();
 */
export async function startRefusingTokenIssuer(status: number, code: string): Promise<RefusingTokenIssuer> {
  const requests: RefusingTokenIssuer['requests'] = [];
  const server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      requests.push({ path: request.url ?? '', form: new URLSearchParams(body) });
      response
        .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
        .end(JSON.stringify({ error: code }));
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

/**
 * `@openfga/sdk` client-credentials settings that exchange `secret` at `issuer`.
 *
 * @example
 * createOpenFgaSink({ apiUrl, storeId, credentials: clientCredentials(issuer.url, 'the-client-secret') });
 */
export const clientCredentials = (issuer: string, secret: string) => ({
  method: CredentialsMethod.ClientCredentials as const,
  config: {
    clientId: 'outbox-drainer',
    clientSecret: secret,
    apiTokenIssuer: issuer,
    apiAudience: 'https://openfga.example/',
  },
});
