// Runs the scripted incident, then probes with node's fetch what must not need a browser.
import Fastify from 'fastify';
import { readOutboxActions } from '@outbox/outbox';
import { listRows } from '@outbox/reconciler';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { outboxConsole } from './index.js';
import { scriptedIncident, thingsOwner, type Incident } from './testing/incident.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
let incident: Incident;
let app: ReturnType<typeof Fastify>;
let url: string;

beforeAll(async () => {
  incident = await scriptedIncident(t.db, fga);
  app = Fastify();
  const config = openFgaClientConfig(fga.storeId, fga.authorizationModelId);
  const outboxes = [{ name: 'vpc', spec: incident.spec, db: t.db, owner: thingsOwner() }];
  const openfga = { ...config, storeId: fga.storeId };
  await app.register(outboxConsole, { prefix: '/console', outboxes, openfga, actions: { enabled: true } });
  await app.register(outboxConsole, { prefix: '/ro', outboxes, openfga });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await app?.close();
});

test('debug', async () => {
  const rows = await listRows({ spec: incident.spec, db: t.db }, { limit: 100 });
  console.log(rows.rows.map((r) => [r.id, r.partitionKey, r.state, r.lastError]));
  for (const path of ['/', '/poisoned', '/timeline?partition=vpc:web', '/redrive', '/drift?run=1', '/provenance?user=user:mallory&relation=can_view&object=vpc:web']) {
    const res = await fetch(`${url}/console${path}`);
    console.log(path, res.status, (await res.text()).length);
  }
  expect(await readOutboxActions(t.db, incident.spec)).toEqual([]);
});
