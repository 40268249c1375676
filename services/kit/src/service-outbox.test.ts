import { setTimeout as sleep } from 'node:timers/promises';
import { nlbOutbox, vpcOutbox, vpcTable } from '@outbox/migrations';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { registerServiceOwner } from './register-owner.js';
import { recordingLogger } from './testing/index.js';
import { createServiceOutbox, type ServiceOutboxConfig } from './service-outbox.js';
import type { OutboxSpec } from '@outbox/outbox';

const t = useTestDatabase();
const fga = useOpenFgaStore();

/** A service outbox whose timers stay out of the way (an hour), without flush on write. */
const quietOutbox = (spec: OutboxSpec, extra: Partial<ServiceOutboxConfig> = {}) =>
  createServiceOutbox({
    db: t.db,
    spec,
    openfga: { apiUrl: fga.apiUrl, storeId: fga.storeId, authorizationModelId: fga.authorizationModelId },
    drainIntervalMs: 3_600_000,
    redriveIntervalMs: 3_600_000,
    flushOnWrite: false,
    flushTimeoutMs: 1_000,
    retryBackoff: {},
    logger: recordingLogger(),
    ...extra,
  });

test('redrive after a model change revives every poisoned intent, not just one batch', async () => {
  // 1,200 poisoned register intents, more than one reconciler batch (500), each its own resource.
  await sql`
    insert into vpc.fga_register_outbox (resource_id, payload, attempt_count, last_error, is_head)
    select 'vpc:v' || g, jsonb_build_object('writes', jsonb_build_array(jsonb_build_object(
             'user', 'project:p1', 'relation', 'project', 'object', 'vpc:v' || g))),
           ${vpcOutbox.maxAttempts}, 'validation_error: type vpc not found (old model)', false
    from generate_series(1, 1200) g`.execute(t.db);
  const outbox = quietOutbox(vpcOutbox);
  // Keep the drainer out of it (redrive kicks it): this test is about what redrive leaves behind.
  await outbox.drainer.stop();
  const result = await outbox.redrive();
  expect(result.revived).toHaveLength(1_200);
  expect(result.superseded).toEqual([]);
  expect(await outbox.stats()).toMatchObject({ poisoned: 0, deliverable: 1_200 });
  // Each revived intent is its partition's head again: the drainer will claim every one.
  const heads = await sql<{ n: number }>`select count(*)::int as n from vpc.fga_register_outbox where is_head`.execute(
    t.db,
  );
  expect(heads.rows[0]?.n).toBe(1_200);
});

describe("the incremental audit on the reconciler's timer", () => {
  const outboxWith = (config: Partial<ServiceOutboxConfig>) =>
    quietOutbox(vpcOutbox, { owner: registerServiceOwner({ fgaType: 'vpc', resourceTable: vpcTable }), ...config });

  test('with repair off, reports drift at WARN, a full audit first and then each change made around the outbox, and repairs nothing', async () => {
    const ghost = (object: string) => [{ user: 'user:eve', relation: 'owner', object }];
    const logger = recordingLogger();
    const drift = () =>
      logger.entries.filter((e) => e.level === 'warn' && e.message.includes('differs from the owner'));
    /** Until an audit reported `objects` orphan objects. */
    const until = async (objects: number) => {
      const seen = () => drift().some((e) => e.fields?.orphanObjects === objects);
      const deadline = Date.now() + 10_000;
      while (!seen() && Date.now() < deadline) await sleep(50);
      expect(seen()).toBe(true);
    };
    const count = async () =>
      (await sql<{ n: number }>`select count(*)::int as n from vpc.fga_register_outbox`.execute(t.db)).rows[0]?.n;
    const before = await count();
    // A grant on a vpc no row of the service names, made around the outbox.
    await fga.client.write({ writes: ghost('vpc:ghost1') });
    const outbox = outboxWith({ auditIntervalMs: 100, logger, repair: false });
    await outbox.reconciler.start();
    try {
      await until(1);
      // Another, after the first audit: the next incremental one reads it from OpenFGA's changelog.
      await fga.client.write({ writes: ghost('vpc:ghost2') });
      await until(2);
    } finally {
      await outbox.reconciler.stop();
    }
    // The first ghost stays in view (carried: it is still drifted), the second joins it.
    expect(drift()[0]?.fields).toMatchObject({ outbox: vpcOutbox.table, mode: 'incremental', orphanObjects: 1 });
    expect(drift().at(-1)?.fields).toMatchObject({ mode: 'incremental', orphanObjects: 2 });
    expect(logger.entries.filter((e) => e.message.includes('detection only'))).toHaveLength(1);
    expect(await count()).toBe(before); // nothing enqueued: detection only
    await fga.client.write({ deletes: [...ghost('vpc:ghost1'), ...ghost('vpc:ghost2')] });
  }, 30_000);

  test('auditIntervalMs 0, or no owner: no audit runs on the timer (and without an owner, none at all)', async () => {
    for (const config of [{ auditIntervalMs: 0 }, { owner: undefined, auditIntervalMs: 50 }]) {
      const logger = recordingLogger();
      const outbox = outboxWith({ ...config, logger });
      await outbox.reconciler.start();
      await sleep(300);
      await outbox.reconciler.stop();
      expect(logger.entries.filter((e) => e.message.startsWith('audit'))).toEqual([]);
    }
    expect(await outboxWith({ owner: undefined }).audit()).toBeUndefined();
  });
});

test("redrive retries intents OpenFGA refused for good (it is what a model change asks); compaction runs on the reconciler's timer", async () => {
  await sql`
    insert into nlb.fga_register_outbox (resource_id, payload, attempt_count, last_error, poison_cause, poison_code, is_head, sent_at)
    select 'load_balancer:lb' || g, jsonb_build_object('writes', jsonb_build_array(jsonb_build_object(
             'user', 'project:p1', 'relation', 'project', 'object', 'load_balancer:lb' || g))),
           case when g = 3 then ${nlbOutbox.maxAttempts} else 0 end, case when g = 3 then 'OpenFGA 400 validation_error' end,
           case when g = 3 then 'refused' end, case when g = 3 then 'validation_error' end, false,
           case when g < 3 then now() end
    from generate_series(1, 3) g`.execute(t.db);
  // Two deliveries of one object: the earlier is compacted, its last word stays.
  await sql`update nlb.fga_register_outbox set resource_id = 'load_balancer:lb2' where resource_id = 'load_balancer:lb1'`.execute(
    t.db,
  );
  const outbox = quietOutbox(nlbOutbox, { compaction: { intervalMs: 20, retentionMs: 0 } });
  await outbox.drainer.stop();
  const result = await outbox.redrive();
  expect(result.revived.map((r) => r.poisonCode)).toEqual(['validation_error']);
  await outbox.reconciler.start();
  try {
    for (const deadline = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 20))) {
      const rows = await sql<{
        n: number;
      }>`select count(*)::int as n from nlb.fga_register_outbox where resource_id = 'load_balancer:lb2'`.execute(t.db);
      if (rows.rows[0]?.n === 1) break;
      if (Date.now() > deadline) throw new Error('not compacted');
    }
  } finally {
    await outbox.reconciler.stop();
  }
});
