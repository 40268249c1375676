import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { enqueue } from '@outbox/outbox';
import { serviceClient, startService, type RunningService } from '@outbox/service-kit';
import { serviceOptionsFor } from '@outbox/service-kit/testing';
import {
  dashboardAndAlertQueries,
  parsePrometheusText,
  scrapeGaps,
  type PrometheusScrape,
} from '@outbox/test-observability';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vpcService } from './index.js';

// /metrics against real Postgres and OpenFGA: what a Prometheus scraping the service reads, after a
// scripted run (deliveries, a refusal, a redrive pass, a discard, a failed pass, an audit, and a
// discard by an operator's `outbox discard` in a process of its own).
const t = useTestDatabase();

/** `pnpm outbox <args>` from the repository's root, as an operator runs it: another process than the service's. */
async function outboxCli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  const child = spawn('pnpm', ['--silent', 'outbox', ...args], {
    cwd: join(import.meta.dirname, '..', '..', '..'),
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, output };
}
const fga = useOpenFgaStore();
const spec = vpcService.outbox;
const table = { outbox_table: spec.table };

let service: RunningService;
let text: string;
let scrape: PrometheusScrape;
beforeAll(async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:metrics' }] });
  // The scheduled redrive would add passes of its own: the script runs the one it counts.
  service = await startService(vpcService, serviceOptionsFor(t, fga, { redriveIntervalMs: 86_400_000 }));

  // Two creates, each flushed before its 201: two deliveries.
  const api = serviceClient(service.url, 'alice');
  for (const name of ['a', 'b']) {
    expect((await api.post('/vpcs', { project_id: 'metrics', name, cidr_block: '10.0.0.0/16' })).status).toBe(201);
  }
  // An intent OpenFGA refuses (a relation the model lacks), poisoned at once; a redrive pass leaves a refused row alone; an operator discards it.
  const refused = await t.db.transaction().execute((trx) =>
    enqueue(trx, spec, {
      partitionKey: 'vpc:refused',
      payload: { writes: [{ user: 'user:alice', relation: 'no_such_relation', object: 'vpc:refused' }] },
    }),
  );
  await expect(service.outbox.drainer.flush({ partitionKey: 'vpc:refused', timeoutMs: 10_000 })).rejects.toMatchObject({
    name: 'FlushPoisonedError',
  });
  expect(await service.outbox.reconciler.redrivePoisoned()).toMatchObject({ revived: [], skipped: false });
  expect(
    await service.outbox.reconciler.discardPoisoned({
      ids: [refused],
      reason: 'never meant to be granted (metrics test)',
    }),
  ).toHaveLength(1);
  // Another refused intent, discarded by an operator with the CLI: its process has no /metrics, the actions log counts it.
  const byOperator = await t.db.transaction().execute((trx) =>
    enqueue(trx, spec, {
      partitionKey: 'vpc:refused-too',
      payload: { writes: [{ user: 'user:alice', relation: 'no_such_relation', object: 'vpc:refused-too' }] },
    }),
  );
  await expect(
    service.outbox.drainer.flush({ partitionKey: 'vpc:refused-too', timeoutMs: 10_000 }),
  ).rejects.toMatchObject({ name: 'FlushPoisonedError' });
  const cli = await outboxCli([
    'discard',
    byOperator,
    '--reason',
    'not wanted (metrics test)',
    '--yes',
    '--actor',
    'metrics-test',
    ...['--database-url', t.url, '--table', spec.table, '--partition-column', spec.partitionColumn],
  ]);
  expect(cli.code, cli.output).toBe(0);
  // A pass against a table that went away fails (and counts); the table comes back.
  await sql.raw(`alter table ${spec.table} rename to gone_for_a_moment`).execute(t.db);
  try {
    await expect(service.outbox.drainOnce()).rejects.toThrow(/does not exist/);
  } finally {
    await sql.raw(`alter table ${spec.schema}.gone_for_a_moment rename to ${spec.tableName}`).execute(t.db);
  }
  expect(await service.outbox.audit()).toMatchObject({ drifted: 0 });

  const answer = await fetch(`${service.url}/metrics`);
  expect(answer.status).toBe(200);
  expect(answer.headers.get('content-type')).toMatch(/^text\/plain/);
  text = await answer.text();
  scrape = parsePrometheusText(text);
});
afterAll(() => service?.stop());

describe('/metrics', () => {
  test("serves the outbox's gauges, counters and histograms with the scripted run's exact values", () => {
    const cause = (c: string) => ({ ...table, outbox_poison_cause: c });
    const expected: Array<[string, Record<string, string>, number]> = [
      ['outbox_drainer_delivered_total', table, 2],
      ['outbox_drainer_delivery_lag_count', table, 2], // one per delivered intent
      ['outbox_drainer_delivery_lag_bucket', { ...table, le: '+Inf' }, 2],
      ['outbox_drainer_poisoned_total', table, 2], // the two refused intents
      ['outbox_reconciler_passes_total', { ...table, outbox_pass_result: 'completed' }, 1],
      ['outbox_reconciler_revived_total', table, 0],
      ['outbox_reconciler_discarded_total', table, 1], // the service's own discardPoisoned, not the CLI's
      ['outbox_actions_total', { ...table, outbox_action: 'discard' }, 1], // the CLI's, from the actions log
      ['outbox_actions_total', { ...table, outbox_action: 'redrive' }, 0],
      ['outbox_audit_drifted', { ...table, outbox_audit_mode: 'incremental' }, 0],
      ['outbox_intent_deliverable', table, 0],
      ['outbox_intent_poisoned', cause('exhausted'), 0],
      ['outbox_intent_poisoned', cause('refused'), 0], // discarded: no longer pending
    ];
    expect(expected.map(([name, labels]) => [name, labels, scrape.value(name, labels)])).toEqual(expected);
    // The timer's passes may have failed during the rename too: at least the one the script ran.
    expect(
      scrape.value('outbox_drainer_pass_failures_total', { ...table, outbox_pass_halted: 'false' }),
    ).toBeGreaterThanOrEqual(1);
    expect(scrape.value('outbox_drainer_delivery_lag_sum', table)).toBeGreaterThan(0);
    expect(text).toMatch(/^# TYPE outbox_drainer_delivery_lag histogram$/m);
    expect(text).toMatch(/^# UNIT outbox_drainer_delivery_lag s$/m);
  });

  test('has every metric and label the Grafana dashboard and the alert rules read', () => {
    // The repair counters too: a service repairs what its audits find, and starts them at 0.
    expect(scrapeGaps(dashboardAndAlertQueries(), scrape)).toEqual([]);
    for (const name of ['outbox_repair_partitions_repaired_total', 'outbox_repair_refused_total'])
      expect(scrape.value(name, table), name).toBe(0);
  });
});
