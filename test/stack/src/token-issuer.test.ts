import { expect, test } from 'vitest';
import { clientCredentials, startRefusingTokenIssuer } from './token-issuer.js';

test('the stand-in token issuer refuses an exchange with the status and OAuth error asked for, and records its form', async () => {
  const issuer = await startRefusingTokenIssuer(400, 'unauthorized_client');
  try {
    const { config } = clientCredentials(issuer.url, 'the-client-secret');
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: config.clientId,
      client_secret: config.clientSecret,
    });
    const response = await fetch(`${config.apiTokenIssuer}/oauth/token`, { method: 'POST', body: form });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({ error: 'unauthorized_client' });
    expect(issuer.requests.map((r) => ({ path: r.path, secret: r.form.get('client_secret') }))).toEqual([
      { path: '/oauth/token', secret: 'the-client-secret' },
    ]);
  } finally {
    await issuer.close();
  }
});
