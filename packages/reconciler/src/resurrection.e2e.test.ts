/**
 * The bug the reconciler exists not to have (docs/design.md §1, §6), end to end with a real drainer, the
 * real OpenFGA sink and a real OpenFGA: a "register" poisoned by an outage must not be replayed
 * after the resource's "deregister" was delivered, or revoked access comes back for good.
 */
import { CredentialsMethod } from '@openfga/sdk';
import { createDrainer, type Drainer } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import type { IntentPayload, OutboxSpec } from '@outbox/outbox';
import { resetHeads, tableNames } from '@outbox/outbox/protocol';
import { freePort, stackInfo, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import { createTestOutbox, enqueueIntent, readRow, recordingLogger } from './testing/outbox-fixture.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();

const tuples = (resource: string) => [
  { user: 'user:ann', relation: 'owner', object: `vpc:${resource}` },
  { user: 'project:p1', relation: 'project', object: `vpc:${resource}` },
];
const registerVpc = (resource: string): IntentPayload => ({ writes: tuples(resource) });
const deregisterVpc = (resource: string): IntentPayload => ({ deletes: tuples(resource) });

/** Every tuple OpenFGA stores on `object` (`read`, not `check`: inheritance cannot fake it). */
async function storedOn(object: string): Promise<string[]> {
  const { tuples: found } = await fga.client.read({ object });
  return found.map((x) => `${x.key.user} ${x.key.relation} ${x.key.object}`).sort();
}

function drainerFor(spec: OutboxSpec, apiUrl: string): Drainer {
  const presharedKey = stackInfo().openfgaPresharedKey;
  const sink = createOpenFgaSink({
    apiUrl,
    storeId: fga.storeId,
    authorizationModelId: fga.authorizationModelId,
    timeoutMs: 2_000,
    ...(presharedKey ? { credentials: { method: CredentialsMethod.ApiToken, config: { token: presharedKey } } } : {}),
  });
  return createDrainer({ db: t.db, spec, sink, backoff: { baseMs: 1, maxMs: 1 }, logger: recordingLogger() });
}

/** Drains against an OpenFGA that is not there until every row in `ids` has used up its attempts. */
async function exhaustWhileDown(spec: OutboxSpec, drainer: Drainer, ids: readonly string[]): Promise<void> {
  const table = sql.raw(tableNames(spec).table);
  for (let pass = 0; pass < spec.maxAttempts * 3; pass += 1) {
    await drainer.drainOnce();
    const rows = await Promise.all(ids.map((id) => readRow(t.db, spec, id)));
    if (rows.every((row) => row.attempt_count >= spec.maxAttempts)) return;
    await sql`update ${table} set next_attempt_at = now() where sent_at is null`.execute(t.db);
  }
  throw new Error(`intents ${ids.join(', ')} were not all poisoned`);
}

describe('a poisoned register behind a delivered deregister', () => {
  test('is reported superseded, not revived: the revoked tuples stay gone', async () => {
    const spec = await createTestOutbox(t.db, { maxAttempts: 3 });

    // vpc:x is created and deleted while OpenFGA is unreachable; vpc:y is the control.
    const unreachable = `http://127.0.0.1:${await freePort()}`;
    const down = drainerFor(spec, unreachable);
    const ids: Record<string, { reg: string; dereg: string }> = {};
    for (const resource of ['x', 'y']) {
      const reg = await enqueueIntent(t.db, spec, `vpc:${resource}`, registerVpc(resource));
      const dereg = await enqueueIntent(t.db, spec, `vpc:${resource}`, deregisterVpc(resource));
      ids[resource] = { reg, dereg };
    }
    await exhaustWhileDown(spec, down, [ids.x!.reg, ids.y!.reg]);
    await down.stop();
    expect(await readRow(t.db, spec, ids.x!.reg)).toMatchObject({
      attempt_count: spec.maxAttempts,
      last_error: expect.stringMatching(/unreachable|ECONNREFUSED/i),
    });

    // OpenFGA is back: the deregisters are delivered (a delete of a missing tuple is ignored).
    const up = drainerFor(spec, fga.apiUrl);
    await up.drainOnce();
    expect(await readRow(t.db, spec, ids.x!.dereg)).toMatchObject({ delivered: true });
    expect(await readRow(t.db, spec, ids.y!.dereg)).toMatchObject({ delivered: true });

    const logger = recordingLogger();
    const result = await createReconciler({ db: t.db, spec, logger }).redrivePoisoned();
    expect(result.revived).toEqual([]);
    expect(result.superseded.map((s) => s.id)).toEqual([ids.x!.reg, ids.y!.reg]);
    expect(result.superseded[0]).toMatchObject({
      partitionKey: 'vpc:x',
      lastError: expect.stringMatching(/unreachable|ECONNREFUSED/i),
    });
    expect(logger.entries.some((e) => e.level === 'warn')).toBe(true);

    // A drainer pass afterwards has nothing to deliver for vpc:x, and OpenFGA holds nothing on it.
    expect((await up.drainOnce()).claimed).toBe(0);
    expect(await storedOn('vpc:x')).toEqual([]);
    expect(await readRow(t.db, spec, ids.x!.reg)).toMatchObject({ attempt_count: spec.maxAttempts, delivered: false });

    // Control: what a naive redrive ("reset every poisoned row") does to vpc:y — the access the
    // deregister revoked comes back, and nothing later will remove it.
    await t.db.transaction().execute(async (trx) => {
      await sql`update ${sql.raw(tableNames(spec).table)} set attempt_count = 0, last_error = null where id = ${ids.y!.reg}`.execute(
        trx,
      );
      await resetHeads(trx, spec, ['vpc:y']);
    });
    await up.drainOnce();
    expect(await storedOn('vpc:y')).toEqual(['project:p1 project vpc:y', 'user:ann owner vpc:y']);
    await up.stop();
  });
});
