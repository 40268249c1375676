import pg from 'pg';

/** True when Postgres at `url` answers a real query. */
export async function postgresAnswers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const result = await client.query<{ ok: number }>('select 1 as ok');
    return result.rows[0]?.ok === 1;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** True when OpenFGA at `apiUrl` reports SERVING on /healthz. */
export async function openFgaServing(apiUrl: string, presharedKey?: string): Promise<boolean> {
  const headers: Record<string, string> = presharedKey ? { authorization: `Bearer ${presharedKey}` } : {};
  const response = await fetch(new URL('/healthz', apiUrl), { headers, signal: AbortSignal.timeout(2_000) });
  if (!response.ok) return false;
  const body = (await response.json()) as { status?: string };
  return body.status === 'SERVING';
}
