/**
 * The libraries' metrics as Prometheus scrapes them: the real OpenTelemetry SDK with its Prometheus
 * exporter on a loopback port, a scripted scenario against the real stack (a drainer with the real
 * OpenFGA sink, an outage, a refusal, a revival, a discard, drift, a repair) and exact values in `/metrics`.
 * The rendered names are checked against the instrument table of docs/metrics.md both ways.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createDrainer, type DrainerEvent, type DrainResult } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { defineOutbox, enqueue, observeOutbox } from '@outbox/outbox';
import { documentedInstruments, parsePrometheusText, type PrometheusScrape } from '@outbox/test-observability';
import { freePort, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import manifest from '../package.json' with { type: 'json' };
import { auditWorld } from './testing/audit-fixture.js';
import { auditOutbox, createReconciler, createReconcilerMetrics, repairOutbox } from './index.js';
import { recordingLogger } from './testing/outbox-fixture.js';

const t = useTestDatabase();

const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };
const PROMETHEUS_TYPE: Record<string, string> = { counter: 'counter', gauge: 'gauge', histogram: 'histogram' };

describe('the metrics, scraped by Prometheus', () => {
  test('a scenario against the real stack shows in /metrics with exact values, under the names docs/metrics.md lists', async () => {
    const port = await freePort();
    const exporter = new PrometheusExporter({ host: '127.0.0.1', port, preventServerStart: true });
    await exporter.startServer();
    const meterProvider = new MeterProvider({ readers: [exporter] });
    const scrape = async (): Promise<PrometheusScrape> => {
      const response = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(response.status).toBe(200);
      return parsePrometheusText(await response.text());
    };

    const world = await auditWorld(t.db); // an owner table, its outbox (maxAttempts 3), an OpenFGA store
    const spec = world.spec;
    const events: DrainerEvent[] = [];
    const results: DrainResult[] = [];
    const drainerOn = (apiUrl?: string) => {
      const sink = apiUrl
        ? createOpenFgaSink({ apiUrl, storeId: world.client.storeId!, timeoutMs: 2_000 })
        : createOpenFgaSink({ client: world.client });
      return createDrainer({
        db: t.db,
        spec,
        sink,
        backoff: { baseMs: 1, maxMs: 1 },
        logger: recordingLogger(),
        meterProvider,
        onEvent: (e) => void events.push(e),
      });
    };
    const up = drainerOn();
    const listening = createDrainer({
      db: t.db,
      spec,
      sink: createOpenFgaSink({ client: world.client }),
      intervalMs: 3_600_000,
      listen: { connectionString: t.url },
      logger: recordingLogger(),
      meterProvider,
    });
    const down = drainerOn(`http://127.0.0.1:${await freePort()}`); // nothing listens: every write fails transiently
    const drain = async (drainer: typeof up) => {
      const result = await drainer.drainOnce();
      results.push(result);
      return result;
    };
    const observer = observeOutbox({ db: t.db, spec, meterProvider, minIntervalMs: 0 });
    const reconciler = createReconciler({ db: t.db, spec, logger: recordingLogger(), meterProvider });
    const reconcilerMetrics = createReconcilerMetrics({ meterProvider });
    const table = { outbox_table: spec.table };
    const cause = (c: string) => ({ ...table, outbox_poison_cause: c });

    try {
      // Three resources created and delivered.
      for (const id of ['a', 'b', 'c']) await world.create(id);
      expect(await drain(up)).toMatchObject({ delivered: 3 });

      // d is created while OpenFGA is unreachable: two retries, then poisoned at its third attempt.
      await world.create('d');
      for (const attempt of [1, 2, 3]) {
        await sleep(5); // past the 1 ms backoff
        expect(await drain(down)).toMatchObject(attempt < 3 ? { retried: 1 } : { poisoned: 1 });
      }
      // An intent OpenFGA refuses (a relation the model does not have): poisoned at once. The
      // resource's create path then delivers a register for the same partition: it supersedes it.
      await t.db.transaction().execute((trx) =>
        enqueue(trx, spec, {
          partitionKey: 'vpc:e',
          payload: { writes: [{ user: 'user:ann', relation: 'no_such_relation', object: 'vpc:e' }] },
        }),
      );
      expect(await drain(up)).toMatchObject({ poisoned: 1 });
      await world.create('e');
      expect(await drain(up)).toMatchObject({ delivered: 1 });

      let scraped = await scrape();
      expect(scraped.value('outbox_intent_pending', table)).toBe(2);
      expect(scraped.value('outbox_intent_deliverable', table)).toBe(0);
      expect(scraped.value('outbox_intent_poisoned', cause('exhausted'))).toBe(1); // d
      expect(scraped.value('outbox_intent_poisoned', cause('refused'))).toBe(1); // e's first intent
      expect(scraped.value('outbox_intent_superseded', table)).toBe(1);
      expect(scraped.value('outbox_intent_oldest_deliverable_age', table)).toBe(0);
      expect(scraped.value('outbox_intent_oldest_pending_age', table)).toBeGreaterThan(0);

      // A drainer whose table does not exist: its pass fails.
      const lost = createDrainer({
        db: t.db,
        spec: defineOutbox({ table: 'reconciler.no_such_outbox', partitionColumn: 'resource_id' }),
        sink: createOpenFgaSink({ client: world.client }),
        logger: silent,
        meterProvider,
      });
      await expect(lost.drainOnce()).rejects.toThrow(/does not exist/);
      await lost.stop();

      // The reconciler revives d (exhausted) and reports e's refused intent superseded; d is delivered.
      expect(await reconciler.redrivePoisoned()).toMatchObject({
        revived: [{ partitionKey: 'vpc:d' }],
        superseded: [{ partitionKey: 'vpc:e' }],
      });
      expect((await scrape()).value('outbox_intent_deliverable', table)).toBe(1);
      expect(await drain(up)).toMatchObject({ delivered: 1 });

      // An intent OpenFGA refuses with no successor to supersede it: an operator discards it.
      await t.db.transaction().execute((trx) =>
        enqueue(trx, spec, {
          partitionKey: 'vpc:f',
          payload: { writes: [{ user: 'user:ann', relation: 'no_such_relation', object: 'vpc:f' }] },
        }),
      );
      expect(await drain(up)).toMatchObject({ poisoned: 1 });
      const [refusedF] = events.flatMap((e) => (e.type === 'poisoned' ? e.ids : [])).slice(-1);
      expect(await reconciler.discardPoisoned({ ids: [refusedF!], reason: 'never meant to be granted' })).toHaveLength(
        1,
      );

      // Drift of every kind, found by an audit, repaired through the outbox, delivered, audited clean.
      await world.client.write({
        writes: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:a' }],
        deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }],
      });
      await sql`delete from ${sql.raw(world.table)} where id = 'c'`.execute(t.db);
      reconcilerMetrics.recordAudit(await auditOutbox(world.target));
      expect((await scrape()).value('outbox_audit_drifted', { ...table, outbox_audit_mode: 'full' })).toBe(3);
      reconcilerMetrics.recordRepair(await repairOutbox({ ...world.target, dryRun: false }));
      expect(await drain(up)).toMatchObject({ delivered: 3 });
      reconcilerMetrics.recordAudit(await auditOutbox(world.target));
      // A drainer holding LISTEN, for its gauge (nothing is left that it could claim).
      await listening.start();

      scraped = await scrape();
      const full = { ...table, outbox_audit_mode: 'full' };
      const expected: Array<[string, Record<string, string>, number]> = [
        ['outbox_drainer_delivered_total', table, 8], // a, b, c, e, d, and the repair's 3 corrections
        ['outbox_drainer_retried_total', table, 2],
        ['outbox_drainer_poisoned_total', table, 3], // d, e's first intent, f's
        [
          'outbox_drainer_pass_failures_total',
          { outbox_table: 'reconciler.no_such_outbox', outbox_pass_halted: 'false' },
          1,
        ],
        ['outbox_reconciler_passes_total', { ...table, outbox_pass_result: 'completed' }, 1],
        ['outbox_reconciler_revived_total', table, 1],
        ['outbox_reconciler_superseded_found_total', table, 1],
        ['outbox_reconciler_discarded_total', table, 1],
        ['outbox_audit_drift_found_total', { ...full, outbox_drift_kind: 'missing' }, 1],
        ['outbox_audit_drift_found_total', { ...full, outbox_drift_kind: 'unexpected' }, 1],
        ['outbox_audit_drift_found_total', { ...full, outbox_drift_kind: 'orphan' }, 2],
        ['outbox_audit_drifted', full, 0],
        ['outbox_repair_drift_repaired_total', { ...table, outbox_repair_operation: 'write' }, 1],
        ['outbox_repair_drift_repaired_total', { ...table, outbox_repair_operation: 'delete' }, 3],
        ['outbox_intent_pending', table, 1], // e's refused intent, superseded: for a human to retire
        ['outbox_intent_deliverable', table, 0],
        ['outbox_intent_poisoned', cause('exhausted'), 0],
        ['outbox_intent_poisoned', cause('refused'), 1],
        ['outbox_intent_superseded', table, 1],
        ['outbox_intent_oldest_deliverable_age', table, 0],
        ['outbox_drainer_listening', table, 1],
      ];
      expect(expected.map(([name, labels]) => [name, labels, scraped.value(name, labels)])).toEqual(expected);

      // Histograms: one observation per claimed batch (and per sink call that delivered), in seconds.
      const claims = events.filter((e) => e.type === 'batch-claimed');
      const deliveries = events.filter((e) => e.type === 'delivered');
      const claimed = results.reduce((sum, r) => sum + r.claimed, 0);
      expect(scraped.value('outbox_drainer_batch_size_count', table)).toBe(claims.length);
      expect(scraped.value('outbox_drainer_batch_size_sum', table)).toBe(claimed);
      expect(scraped.value('outbox_drainer_batch_size_bucket', { ...table, le: '+Inf' })).toBe(claims.length);
      expect(scraped.value('outbox_drainer_claim_duration_count', table)).toBe(claims.length);
      expect(scraped.value('outbox_drainer_claim_duration_sum', table)).toBeCloseTo(
        claims.reduce((sum, e) => sum + e.claimMs, 0) / 1_000,
        6,
      );
      expect(scraped.value('outbox_drainer_claim_duration_bucket', { ...table, le: '30' })).toBe(claims.length);
      expect(scraped.value('outbox_drainer_delivery_duration_count', table)).toBe(deliveries.length);
      // Commit → delivered: one observation per delivered intent, as the delivered events measured it.
      const lags = deliveries.flatMap((e) => e.lagMs);
      expect(lags).toHaveLength(8);
      expect(scraped.value('outbox_drainer_delivery_lag_count', table)).toBe(8);
      expect(scraped.value('outbox_drainer_delivery_lag_sum', table)).toBeCloseTo(
        lags.reduce((sum, ms) => sum + ms, 0) / 1_000,
        6,
      );
      expect(scraped.value('outbox_drainer_delivery_lag_bucket', { ...table, le: '+Inf' })).toBe(8);

      // How the exporter renders: dots to underscores, `_total` on counters, no unit suffix (the unit
      // goes to `# UNIT`), and the meter's name and version as labels.
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(text).toContain(
        `outbox_reconciler_revived_total{outbox_table="${spec.table}",otel_scope_name="@outbox/reconciler",otel_scope_version="${manifest.version}"} 1\n`,
      );
      expect(text).toContain(
        '# UNIT outbox_drainer_claim_duration s\n# TYPE outbox_drainer_claim_duration histogram\n',
      );

      // docs/metrics.md lists exactly the families the scrape has, with their types and units.
      const documented = documentedInstruments();
      const ours = [...scraped.families].filter(([name]) => name.startsWith('outbox_'));
      expect(
        ours
          .map(([name, family]) => ({ name, type: family.type, unit: family.unit }))
          .sort((a, b) => a.name.localeCompare(b.name)),
      ).toEqual(
        documented
          .map((i) => ({ name: i.prometheus, type: PROMETHEUS_TYPE[i.kind], unit: i.unit }))
          .sort((a, b) => a.name.localeCompare(b.name)),
      );
      // And each documented instrument's attributes are the labels its samples carry (besides the scope's).
      for (const instrument of documented) {
        const series =
          instrument.kind === 'histogram'
            ? ['_bucket', '_sum', '_count'].map((suffix) => instrument.prometheus + suffix)
            : [instrument.prometheus];
        const labels = new Set(
          scraped.samples.filter((s) => series.includes(s.name)).flatMap((s) => Object.keys(s.labels)),
        );
        for (const scope of ['otel_scope_name', 'otel_scope_version', 'le']) labels.delete(scope);
        expect([...labels].sort(), instrument.name).toEqual(
          instrument.attributes.map((a) => a.replaceAll('.', '_')).sort(),
        );
      }
    } finally {
      observer.stop();
      await reconciler.stop();
      await up.stop();
      await down.stop();
      await listening.stop();
      await meterProvider.shutdown(); // stops the exporter's server
    }
  });
});
