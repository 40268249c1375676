/**
 * What the protocol model found (docs/protocol-model.md, lateWriteOfAPoisonedIntentTest), with
 * real drainers, the real sink and a real OpenFGA: a register R whose Write times out on its last
 * attempt is poisoned while a proxy still holds the Write; the deregister D behind it is delivered
 * at once (a poisoned row does not block) and, following no close delivery, is not stamped for the
 * late-write check; R's Write then lands. No check ever looks: past the horizon OpenFGA still holds
 * the revoked grant. The audit and repair cover it, once R is retired (until then the partition
 * has an intent pending, and the audit skips it), through an intent the outbox delivers.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createDrainer, type Drainer, type DrainerConfig } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import type { IntentPayload } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { openFgaClientConfig, startDelayingProxy, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, onTestFinished, test } from 'vitest';
import { auditCursorTableDdl, auditOutbox, auditOutboxIncremental, createReconciler, repairOutbox } from './index.js';
import { auditWorld, resourceTuples, type AuditWorld } from './testing/audit-fixture.js';
import { recordingLogger } from './testing/outbox-fixture.js';

const t = useTestDatabase();

/** The sinks give up on a Write after 1 s; OpenFGA's own request timeout (3 s) makes its lifetime 4 s. */
const SINK_TIMEOUT_MS = 1_000;
/** The late-write check's delay, shortened from 14 s: at least the write lifetime. */
const VERIFY_DELAY_MS = 5_000;
const INTERVAL_MS = 100;
/** H: the check's delay, one drainer interval, one delivery (and room for a loaded machine). */
const HORIZON_MS = VERIFY_DELAY_MS + INTERVAL_MS + 2_000;
const lateWrites: DrainerConfig['lateWrites'] = { verifyDelayMs: VERIFY_DELAY_MS };
const granted = ['project:p1 project vpc:x', 'user:ann owner vpc:x'];

/** Polls `read` until `done` holds of its value, or `timeoutMs` passed; returns the last value. */
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(50);
  }
}

async function ledger(world: AuditWorld) {
  const result = await sql<{
    id: string;
    delivered: boolean;
    poisonCause: string | null;
    closedAs: string | null;
    stamped: boolean;
    source: string | null;
    payload: IntentPayload;
  }>`
    select id::text as id, sent_at is not null as delivered, poison_cause as "poisonCause", closed_as as "closedAs",
      verify_after is not null as stamped, payload->>'source' as source, payload
    from ${sql.raw(tableNames(world.spec).table)} order by id`.execute(t.db);
  return result.rows;
}

/** Row `index` of the ledger (in id order), which must be there. */
async function ledgerRow(world: AuditWorld, index: number) {
  const row = (await ledger(world))[index];
  if (!row) throw new Error(`the outbox has no row #${index + 1}`);
  return row;
}

/** A drainer with the late-write check on, its sink through `apiUrl`; and the lifetime its sink declares. */
function drainer(world: AuditWorld, apiUrl: string): { drainer: Drainer; writeLifetimeMs: number } {
  const sink = createOpenFgaSink({
    ...openFgaClientConfig(world.storeId, world.authorizationModelId),
    storeId: world.storeId,
    apiUrl,
    timeoutMs: SINK_TIMEOUT_MS,
  });
  const d = createDrainer({
    db: t.db,
    spec: world.spec,
    sink,
    logger: recordingLogger(),
    intervalMs: INTERVAL_MS,
    lateWrites,
  });
  onTestFinished(() => d.stop());
  return { drainer: d, writeLifetimeMs: sink.writeLifetimeMs };
}

describe('the late Write of an intent that ends poisoned', () => {
  test('outlives the late-write check; the audit finds it once the intent is retired, and the repair restores agreement through the outbox', async () => {
    const world = await auditWorld(t.db, { maxAttempts: 1 });
    const cursorTable = `reconciler.late_poisoned_cursor`;
    await sql.raw(auditCursorTableDdl(cursorTable)).execute(t.db);
    const incremental = { ...world.target, cursorTable };
    await auditOutboxIncremental(incremental); // the first run stores the changelog's position

    const upstream = new URL(openFgaClientConfig().apiUrl);
    const proxy = await startDelayingProxy({ upstream: { host: upstream.hostname, port: Number(upstream.port) } });
    onTestFinished(() => proxy.close());
    const { drainer: a, writeLifetimeMs } = drainer(world, `http://${proxy.host}:${proxy.port}`);
    const { drainer: b } = drainer(world, openFgaClientConfig().apiUrl);

    // R: A's Write is held; A's sink gives up after 1 s, and R, out of attempts, is poisoned.
    await world.create('x');
    proxy.pause();
    const sentAt = Date.now();
    expect(await a.drainOnce()).toMatchObject({ claimed: 1, delivered: 0, poisoned: 1 });
    expect(proxy.stats().requests).toBe(1);
    const r = await ledgerRow(world, 0);
    expect(r).toMatchObject({ delivered: false, poisonCause: 'exhausted', stamped: false });

    // D: the owner's row goes; B delivers the deregister at once, and stamps nothing.
    await world.remove('x');
    expect(await b.drainOnce()).toMatchObject({ delivered: 1 });
    const d = await ledgerRow(world, 1);
    expect(d).toMatchObject({ delivered: true, stamped: false });
    expect(await world.storedOn('vpc:x')).toEqual([]);

    // R's Write lands, within the lifetime A's sink declares: nothing the late-write check assumes is broken.
    expect(Date.now() - sentAt).toBeLessThan(writeLifetimeMs);
    proxy.resume();
    expect(
      await until(
        () => world.storedOn('vpc:x'),
        (s) => s.length > 0,
        10_000,
      ),
    ).toEqual(granted);
    expect(proxy.stats().requests).toBe(1); // the one Write A sent, landing after its client gave up

    // The gap: past the horizon, with both drainers checking, the revoked grant stands and no check was due.
    await b.start();
    await sleep(HORIZON_MS);
    expect(await world.storedOn('vpc:x')).toEqual(granted);
    expect((await ledger(world)).map((row) => [row.source, row.stamped])).toEqual([
      [null, false],
      [null, false],
    ]);

    // While R is poisoned the partition has an intent pending: no audit reports it, and the incremental
    // one reads the late Write's change now, so it will not look at vpc:x again.
    expect(await auditOutbox(world.target)).toMatchObject({ drifted: 0, skippedPending: 1 });
    expect(await auditOutboxIncremental(incremental)).toMatchObject({ drifted: 0, skippedPending: 1 });

    // Redrive leaves R (superseded by D); an operator retires it. Only a full audit finds the drift now.
    const reconciler = createReconciler({ db: t.db, spec: world.spec, logger: recordingLogger() });
    const pass = await reconciler.redrivePoisoned();
    expect(pass.revived).toEqual([]);
    expect(pass.superseded.map((row) => row.id)).toEqual([r.id]);
    await reconciler.retire([r.id], 'superseded by the deregister');
    expect(await auditOutboxIncremental(incremental)).toMatchObject({ drifted: 0, partitionsCompared: 0 });
    const audit = await auditOutbox(world.target);
    expect(audit).toMatchObject({ drifted: 1, skippedPending: 0, orphans: { objects: 1, tuples: 2 } });

    // The repair: an intent through the outbox, which B delivers; OpenFGA agrees with the owner again.
    const repair = await repairOutbox({ ...world.target, dryRun: false });
    expect(repair).toMatchObject({ partitions: 1, deletes: 2, writes: 0 });
    expect(repair.enqueued).toHaveLength(1);
    expect(
      await until(
        () => world.storedOn('vpc:x'),
        (s) => s.length === 0,
        10_000,
      ),
    ).toEqual([]);
    const rows = await until(
      () => ledger(world),
      (l) => l.every((row) => row.delivered || row.closedAs === 'retired'),
      5_000,
    );
    expect(rows.map((row) => [row.id, row.source, row.delivered, row.closedAs])).toEqual([
      [r.id, null, false, 'retired'],
      [d.id, null, true, null],
      [repair.enqueued[0], 'repair', true, null],
    ]);
    expect(rows[2]?.payload.deletes).toEqual(expect.arrayContaining(resourceTuples('x', 'p1', 'ann')));
    expect(await auditOutbox(world.target)).toMatchObject({ drifted: 0 });
  }, 120_000);
});
