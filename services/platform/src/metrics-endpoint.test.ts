import { serviceClient, startService, type RunningService } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { vpcService } from './index.js';

// /metrics against real Postgres and OpenFGA: what a Prometheus scraping the service reads.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const table = 'outbox_table="vpc.fga_register_outbox"';

let service: RunningService;
beforeAll(async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:metrics' }] });
  service = await startService(vpcService, serviceOptionsFor(t, fga));
});
afterAll(() => service?.stop());

/** The value of the first sample of `name` whose labels include `labels`, or undefined. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

test('/metrics serves the outbox gauges and the drainer counters in the Prometheus text format', async () => {
  const api = serviceClient(service.url, 'alice');
  for (const name of ['a', 'b']) {
    expect((await api.post('/vpcs', { project_id: 'metrics', name, cidr_block: '10.0.0.0/16' })).status).toBe(201);
  }
  const answer = await fetch(`${service.url}/metrics`);
  expect(answer.status).toBe(200);
  expect(answer.headers.get('content-type')).toMatch(/^text\/plain/);
  const text = await answer.text();
  // Both creates were flushed before their 201: delivered, nothing left.
  expect(sample(text, 'outbox_drainer_delivered_total', table)).toBe(2);
  expect(sample(text, 'outbox_intent_deliverable', table)).toBe(0);
  expect(sample(text, 'outbox_intent_poisoned', table)).toBe(0);
  expect(text).toMatch(/^# TYPE outbox_drainer_claim_duration histogram$/m);
});
