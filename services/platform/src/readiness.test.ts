import { vpcOutbox } from '@outbox/migrations';
import { serviceClient, startService, type RunningService } from '@outbox/service-kit';
import { serviceOptionsFor, waitFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vpcService } from './index.js';

// /readyz against real Postgres and OpenFGA: 200 when all is well, 503 naming the check that failed.
// (Postgres down is proved in database-outage.test.ts.)
const t = useTestDatabase();
const fga = useOpenFgaStore();

interface Readiness {
  status: string;
  error?: { code: string; message: string };
  checks: {
    database: { ok: boolean };
    openfga: { ok: boolean; error?: string };
    outbox: { ok: boolean; oldestDeliverableAgeMs: number | null; maxDeliverableAgeMs: number; listen: string };
  };
}

beforeAll(async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'owner', object: 'project:ready' }] });
});

describe('/readyz', () => {
  let service: RunningService;
  beforeAll(async () => {
    // Nothing delivers here: what is committed stays deliverable, as when delivery is stuck.
    service = await startService(
      vpcService,
      serviceOptionsFor(t, fga, {
        flushOnWrite: false,
        runDrainer: false,
        runReconciler: false,
        readyMaxDeliverableAgeMs: 60_000,
      }),
    );
  });
  afterAll(() => service?.stop());
  const ready = () => serviceClient(service.url).get<Readiness>('/readyz');

  test('200 with every check when the database and OpenFGA answer and nothing waits for delivery', async () => {
    expect(await ready()).toMatchObject({
      status: 200,
      body: {
        status: 'ready',
        checks: {
          database: { ok: true },
          openfga: { ok: true },
          outbox: { ok: true, oldestDeliverableAgeMs: null, maxDeliverableAgeMs: 60_000 },
        },
      },
    });
  });

  test("an intent deliverable for longer than readyMaxDeliverableAgeMs: 503 outbox_stalled; once poisoned (the reconciler's), ready again", async () => {
    const created = await serviceClient(service.url, 'alice').post<{ id: string }>('/vpcs', {
      project_id: 'ready',
      name: 'stuck',
      cidr_block: '10.0.0.0/16',
    });
    expect(created.status).toBe(202);
    const fresh = await ready();
    expect(fresh.status).toBe(200);
    expect(fresh.body.checks.outbox.oldestDeliverableAgeMs).toBeLessThan(60_000);

    await sql`update vpc.fga_register_outbox set created_at = now() - interval '2 minutes'`.execute(t.db);
    const stalled = await ready();
    expect(stalled).toMatchObject({
      status: 503,
      body: {
        status: 'not ready',
        error: { code: 'outbox_stalled' },
        checks: { database: { ok: true }, openfga: { ok: true }, outbox: { ok: false } },
      },
    });
    expect(stalled.body.checks.outbox.oldestDeliverableAgeMs).toBeGreaterThanOrEqual(120_000);
    expect(stalled.body.error?.message).toContain('vpc.fga_register_outbox');

    await sql`update vpc.fga_register_outbox set attempt_count = ${vpcOutbox.maxAttempts}, is_head = false`.execute(
      t.db,
    );
    expect((await ready()).status).toBe(200);
  });
});

test('OpenFGA unreachable: 503 authorization_unavailable within the check timeout, the database still ok', async () => {
  const options = serviceOptionsFor(t, fga, { runDrainer: false, runReconciler: false });
  const service = await startService(vpcService, {
    ...options,
    openfga: { ...options.openfga, apiUrl: 'http://127.0.0.1:9' },
  });
  try {
    const started = Date.now();
    const reply = await serviceClient(service.url).get<Readiness>('/readyz');
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(reply).toMatchObject({
      status: 503,
      body: {
        error: { code: 'authorization_unavailable' },
        checks: { database: { ok: true }, openfga: { ok: false } },
      },
    });
  } finally {
    await service.stop();
  }
});

test('readyMaxDeliverableAgeMs 0 turns the outbox check off', async () => {
  const service = await startService(
    vpcService,
    serviceOptionsFor(t, fga, {
      flushOnWrite: false,
      runDrainer: false,
      runReconciler: false,
      readyMaxDeliverableAgeMs: 0,
    }),
  );
  try {
    await sql`delete from vpc.fga_register_outbox`.execute(t.db);
    await serviceClient(service.url, 'alice').post('/vpcs', {
      project_id: 'ready',
      name: 'off',
      cidr_block: '10.1.0.0/16',
    });
    await sql`update vpc.fga_register_outbox set created_at = now() - interval '1 day'`.execute(t.db);
    expect(await serviceClient(service.url).get<Readiness>('/readyz')).toMatchObject({
      status: 200,
      body: { checks: { outbox: { ok: true, maxDeliverableAgeMs: 0 } } },
    });
  } finally {
    await service.stop();
  }
});

test("the drainer's LISTEN state is in the outbox check's detail; lost, the service stays ready (the timer delivers)", async () => {
  const service = await startService(vpcService, serviceOptionsFor(t, fga, { runReconciler: false }));
  try {
    const listen = async () => (await serviceClient(service.url).get<Readiness>('/readyz')).body.checks.outbox.listen;
    // Under load the first answer may come before the LISTEN connection is up.
    await waitFor('the drainer to listen', async () => (await listen()) === 'listening');
    const listener = sql`select pg_terminate_backend(pid) from pg_stat_activity
      where query ilike 'listen%' and datname = current_database()`;
    // Terminated until the poll sees it (the listener may come back between two polls, before the first look).
    let seen: string | undefined;
    for (let i = 0; i < 50 && seen !== 'reconnecting'; i += 1) {
      await listener.execute(t.db);
      seen = await listen();
    }
    expect(seen).toBe('reconnecting');
    // The whole answer on a failure: a check that failed under load says which it was.
    const ready = await serviceClient(service.url).get<Readiness>('/readyz');
    expect(ready.status, JSON.stringify(ready.body)).toBe(200);
  } finally {
    await service.stop();
  }
});
