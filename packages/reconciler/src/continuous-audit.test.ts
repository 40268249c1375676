import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { auditWorld } from './testing/audit-fixture.js';
import { enqueueIntent, poison, recordingLogger } from './testing/outbox-fixture.js';
import {
  auditCursorTableDdl,
  auditOutboxIncremental,
  createContinuousAudit,
  createReconciler,
  RepairBudgetError,
} from './index.js';

const t = useTestDatabase();

let cursors = 0;
async function cursorTable(): Promise<string> {
  cursors += 1;
  const table = `reconciler.continuous_cursor_${cursors}`;
  await sql.raw(auditCursorTableDdl(table)).execute(t.db);
  return table;
}

const mallory = { user: 'user:mallory', relation: 'viewer', object: 'vpc:a' };

describe('createContinuousAudit', () => {
  test('looks again at a drifted partition it skipped as pending once the intent settles without a change in OpenFGA, across a restart too; the incremental audit alone never does', async () => {
    const world = await auditWorld(t.db);
    for (const id of ['a', 'b']) await world.create(id);
    await world.drain();
    const plain = { ...world.target, cursorTable: await cursorTable() };
    const continuous = { ...world.target, cursorTable: await cursorTable(), logger: recordingLogger() };
    const before = createContinuousAudit(continuous);
    expect(await auditOutboxIncremental(plain)).toMatchObject({ drifted: 0 });
    expect(await before.run()).toMatchObject({ report: { drifted: 0 }, carried: 0 });

    // An out-of-band grant on vpc:a while an intent of vpc:a is pending (poisoned): not drift yet.
    await world.client.write({ writes: [mallory] });
    const stray = await enqueueIntent(t.db, world.spec, 'vpc:a', {
      writes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:a' }],
    });
    await poison(t.db, world.spec, stray);
    expect(await auditOutboxIncremental(plain)).toMatchObject({ drifted: 0, skippedPending: 1 });
    expect(await before.run()).toMatchObject({ report: { drifted: 0, skippedPending: 1 }, carried: 1 });

    // The process restarts; the new one's first run takes the partitions pending in the ledger.
    const after = createContinuousAudit(continuous);
    expect(await after.run()).toMatchObject({ report: { drifted: 0, skippedPending: 1 }, carried: 1 });

    // The intent is discarded: settled, and nothing in OpenFGA's changelog says so.
    const reconciler = createReconciler({ db: t.db, spec: world.spec, logger: recordingLogger() });
    expect(await reconciler.discardPoisoned({ ids: [stray], reason: 'stray (test)' })).toHaveLength(1);
    expect(await auditOutboxIncremental(plain)).toMatchObject({ drifted: 0, partitionsCompared: 0 });
    const found = await after.run();
    expect(found).toMatchObject({
      report: { drifted: 1, unexpected: { tuples: 1 } },
      repair: { partitions: 1, deletes: 1, writes: 0 },
      carried: 1, // confirmed again next run: the correction's delivery ends it
    });
    await world.drain();
    expect(await world.storedOn('vpc:a')).toEqual(['project:p1 project vpc:a', 'user:ann owner vpc:a']);
    expect(await after.run()).toMatchObject({ report: { drifted: 0 }, carried: 0 });
    const source = await sql<{ source: string }>`
      select payload->>'source' as source from ${sql.raw(`"${world.spec.schema}"."${world.spec.tableName}"`)}
      where payload->>'source' is not null`.execute(t.db);
    expect(source.rows).toEqual([{ source: 'repair' }]);
    expect(continuous.logger.entries.filter((e) => e.level === 'warn' && e.message.startsWith('repair of'))).toEqual([
      expect.objectContaining({ message: expect.stringMatching(/in 1 partition\(s\): vpc:a$/) }),
    ]);
  });

  test('past the delete budget it enqueues nothing, logs one ERROR while the refusal stands and finds it again every run', async () => {
    const world = await auditWorld(t.db);
    await world.create('a');
    await world.drain();
    const logger = recordingLogger();
    const audit = createContinuousAudit({
      ...world.target,
      cursorTable: await cursorTable(),
      logger,
      repair: { maxDeletes: 1 },
    });
    await audit.run();
    await world.client.write({ writes: [mallory, { ...mallory, user: 'user:trudy' }] });
    const intents = await world.intents();
    for (let run = 0; run < 3; run += 1) {
      const refused = await audit.run();
      expect(refused.refused).toBeInstanceOf(RepairBudgetError);
      expect(refused).toMatchObject({ report: { drifted: 1 }, refused: { deletes: 2, maxDeletes: 1 }, carried: 1 });
    }
    expect(await world.intents()).toBe(intents);
    expect(logger.entries.filter((e) => e.level === 'error')).toEqual([
      expect.objectContaining({ message: expect.stringContaining('automatic repair of') }),
    ]);
  });

  test('repair: false only reports, and keeps the drifted partitions in view', async () => {
    const world = await auditWorld(t.db);
    await world.create('a');
    await world.drain();
    const audit = createContinuousAudit({ ...world.target, cursorTable: await cursorTable(), repair: false });
    await audit.run();
    await world.client.write({ writes: [mallory] });
    const intents = await world.intents();
    expect(await audit.run()).toMatchObject({ report: { drifted: 1 }, carried: 1 });
    expect(await audit.run()).toMatchObject({ report: { drifted: 1, partitionsCompared: 1 }, carried: 1 });
    expect(await world.intents()).toBe(intents);
  });
});
