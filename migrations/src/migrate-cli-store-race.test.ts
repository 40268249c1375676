import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import { runMigrateCli } from './testing/run-cli.js';
import { useScratchDatabases } from './testing/scratch-databases.js';

// Two `pnpm migrate` at once against an OpenFGA whose store listing answers slowly, as a remote one may.

const scratch = useScratchDatabases();
const runCli = (env: Record<string, string | undefined>, args: string[] = []) =>
  runMigrateCli({ OPENFGA_API_TOKEN: undefined, OPENFGA_STORE_ID: undefined, ...env }, args);

/** A stand-in OpenFGA (stores and models only) whose store listing takes `listDelayMs`. */
async function fakeOpenFga(listDelayMs: number) {
  const stores: { id: string; name: string; created_at: string; updated_at: string }[] = [];
  const models = new Map<string, { id: string }[]>();
  const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
  let sequence = 0;
  const ulid = () => {
    sequence += 1;
    return `01${String(sequence).padStart(4, '0')}${Array.from({ length: 20 }, () => alphabet[Math.floor(Math.random() * 32)]).join('')}`;
  };
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const body = async (req: IncomingMessage) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    return text ? JSON.parse(text) : {};
  };
  const http = createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const now = new Date().toISOString();
    if (req.method === 'GET' && path === '/stores') {
      const snapshot = [...stores];
      await sleep(listDelayMs);
      return send(res, 200, { stores: snapshot, continuation_token: '' });
    }
    if (req.method === 'POST' && path === '/stores') {
      const { name } = (await body(req)) as { name: string };
      const store = { id: ulid(), name, created_at: now, updated_at: now };
      stores.push(store);
      return send(res, 201, store);
    }
    const store = /^\/stores\/([^/]+)(\/authorization-models)?$/.exec(path);
    const found = store && stores.find((s) => s.id === store[1]);
    if (!store || !found) return send(res, 404, { code: 'store_id_not_found', message: 'not found' });
    if (!store[2] && req.method === 'GET') return send(res, 200, found);
    if (store[2] && req.method === 'GET')
      return send(res, 200, {
        authorization_models: [...(models.get(found.id) ?? [])].reverse(),
        continuation_token: '',
      });
    if (store[2] && req.method === 'POST') {
      const model = { ...((await body(req)) as object), id: ulid() };
      models.set(found.id, [...(models.get(found.id) ?? []), model]);
      return send(res, 201, { authorization_model_id: model.id });
    }
    return send(res, 404, { code: 'undefined_endpoint', message: 'no' });
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  return {
    url: `http://127.0.0.1:${(http.address() as { port: number }).port}`,
    stores,
    close: () => new Promise((r) => http.close(r)),
  };
}

test('two pnpm migrate at once without OPENFGA_STORE_ID end with one store named outbox, and print the same ids', async () => {
  const database = await scratch.create();
  const fga = await fakeOpenFga(500);
  try {
    const env = { DATABASE_URL: scratch.urlOf(database), OPENFGA_API_URL: fga.url };
    expect((await runCli(env, ['--sql-only'])).code).toBe(0);
    const [a, b] = await Promise.all([runCli(env), runCli(env)]);
    expect(a.code, a.output).toBe(0);
    expect(b.code, b.output).toBe(0);
    expect(fga.stores.map((s) => s.name)).toEqual(['outbox']);
    const ids = (output: string) => [
      /export OPENFGA_STORE_ID=(\S+)/.exec(output)?.[1],
      /export OPENFGA_MODEL_ID=(\S+)/.exec(output)?.[1],
    ];
    expect(ids(a.output)).toEqual(ids(b.output));
    // And a later run still works (it refused to guess between two stores of that name).
    const c = await runCli(env);
    expect(c.code, c.output).toBe(0);
    expect(c.output).toContain('authorization model unchanged');
  } finally {
    await fga.close();
  }
});
