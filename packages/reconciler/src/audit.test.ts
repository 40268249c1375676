import { OutboxConfigError } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { auditWorld, resourceTuples, type AuditWorld } from './testing/audit-fixture.js';
import { auditCursorTableDdl, auditOutbox, auditOutboxIncremental, type TupleReader } from './index.js';

const t = useTestDatabase();

/** Three resources created and delivered: a store that agrees with the owner. */
async function agreed(): Promise<AuditWorld> {
  const world = await auditWorld(t.db);
  for (const id of ['a', 'b', 'c']) await world.create(id);
  await world.drain();
  return world;
}

describe('auditOutbox', () => {
  test('an outbox whose store agrees with the owner audits clean, comparing every partition', async () => {
    const world = await agreed();
    const report = await auditOutbox(world.target);
    expect(report).toMatchObject({
      outbox: world.spec.table,
      mode: 'full',
      objectTypes: ['vpc'],
      partitionsCompared: 3,
      liveTuplesRead: 6,
      candidates: 0,
      skippedPending: 0,
      drifted: 0,
      missing: { partitions: 0, tuples: 0, sample: [] },
      unexpected: { partitions: 0, tuples: 0, sample: [] },
      orphans: { objects: 0, partitions: 0, tuples: 0, sample: [] },
      reads: { tuplePages: 1, partitionReads: 0, changePages: 0 },
    });
  });

  test('out-of-band edits are each found in their kind, with counts and a sample: an added tuple, a deleted one, an orphan', async () => {
    const world = await agreed();
    await world.client.write({
      writes: [
        { user: 'user:mallory', relation: 'viewer', object: 'vpc:a' }, // on a known object
        { user: 'user:eve', relation: 'owner', object: 'vpc:ghost' }, // on an object no row names
      ],
      deletes: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }],
    });
    await sql`delete from ${sql.raw(world.table)} where id = 'c'`.execute(t.db); // by hand: its tuples stay

    const report = await auditOutbox(world.target);
    expect(report.drifted).toBe(4);
    expect(report.missing).toEqual({
      partitions: 1,
      tuples: 1,
      sample: [
        {
          partitionKey: 'vpc:b',
          object: 'vpc:b',
          tuples: [{ user: 'user:ann', relation: 'owner', object: 'vpc:b' }],
          tupleCount: 1,
        },
      ],
    });
    expect(report.unexpected).toEqual({
      partitions: 1,
      tuples: 1,
      sample: [
        {
          partitionKey: 'vpc:a',
          object: 'vpc:a',
          tuples: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:a' }],
          tupleCount: 1,
        },
      ],
    });
    expect(report.orphans).toMatchObject({ objects: 2, partitions: 2, tuples: 3 });
    expect(report.orphans.sample.map((o) => [o.object, o.partitionKeys, o.tupleCount])).toEqual([
      ['vpc:c', ['vpc:c'], 2],
      ['vpc:ghost', ['vpc:ghost'], 1],
    ]);
    expect(report.orphans.sample[0]?.tuples).toEqual(expect.arrayContaining(resourceTuples('c', 'p1', 'ann')));
    // One scan, a second that names the partitions only OpenFGA holds (c, ghost: the first keeps
    // their hashes), then one re-read per candidate partition.
    expect(report.reads).toEqual({ tuplePages: 2, partitionReads: 4, changePages: 0 });
  });

  test('a partition with a pending intent is not drift: it is counted as skipped', async () => {
    const world = await agreed();
    await world.create('d'); // committed, not delivered: OpenFGA lacks its tuples for now
    await world.remove('a'); // the same for a delete
    const report = await auditOutbox(world.target);
    expect(report).toMatchObject({
      drifted: 0,
      candidates: 2,
      skippedPending: 2,
      missing: { tuples: 0 },
      orphans: { tuples: 0 },
    });
    await world.drain();
    expect((await auditOutbox(world.target)).drifted).toBe(0);
  });

  test('what is committed and delivered while the audit runs is re-checked, not reported', async () => {
    const world = await agreed();
    // Created and delivered between the scan (which missed it) and the owner's snapshot.
    const during: TupleReader = {
      ...world.reader,
      async readObjectTypes(types, token) {
        const page = await world.reader.readObjectTypes(types, token);
        if (!page.continuationToken) {
          await world.create('late');
          await world.drain();
        }
        return page;
      },
    };
    const first = await auditOutbox({ ...world.target, reader: during });
    expect(first).toMatchObject({ candidates: 1, drifted: 0, skippedPending: 0 });

    // Deleted and delivered while the confirmation re-reads it: the owner changed between its two
    // snapshots, so the difference is not reported, whichever state the re-read saw.
    await sql`delete from ${sql.raw(world.table)} where id = 'b'`.execute(t.db); // orphan: a candidate
    let once = false;
    const racing: TupleReader = {
      ...world.reader,
      async readTuples(filter, token) {
        if (!once && filter.object === 'vpc:a') {
          once = true;
          await world.remove('a');
          await world.drain();
        }
        return world.reader.readTuples(filter, token);
      },
    };
    await world.client.write({ writes: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:a' }] }); // a candidate
    const second = await auditOutbox({ ...world.target, reader: racing });
    expect(second).toMatchObject({ candidates: 2, skippedPending: 1, drifted: 1, orphans: { objects: 1 } });
    expect(second.orphans.sample.map((o) => o.object)).toEqual(['vpc:b']);
  });

  test('samples are bounded by sampleSize, counts are complete', async () => {
    const world = await agreed();
    await world.client.write({
      writes: Array.from({ length: 5 }, (_, i) => ({ user: 'user:eve', relation: 'owner', object: `vpc:ghost${i}` })),
    });
    await world.client.write({
      writes: Array.from({ length: 5 }, (_, i) => ({ user: `user:m${i}`, relation: 'viewer', object: 'vpc:a' })),
    });
    const report = await auditOutbox({ ...world.target, sampleSize: 2 });
    expect(report.orphans).toMatchObject({ objects: 5, tuples: 5 });
    expect(report.orphans.sample.map((o) => o.object)).toEqual(['vpc:ghost0', 'vpc:ghost1']);
    expect(report.unexpected).toMatchObject({ partitions: 1, tuples: 5 });
    expect(report.unexpected.sample[0]).toMatchObject({ partitionKey: 'vpc:a', tupleCount: 5 });
    expect(report.unexpected.sample[0]?.tuples).toHaveLength(2);
  });

  test('cost: a full audit of 1,000 agreeing objects reads the store 100 tuples a page and re-reads nothing', async () => {
    const world = await auditWorld(t.db);
    const ids = Array.from({ length: 1_000 }, (_, i) => `r${String(i).padStart(4, '0')}`);
    await sql`insert into ${sql.raw(world.table)} (id, project_id, owner) select unnest(${ids}::text[]), 'p1', 'ann'`.execute(
      t.db,
    );
    const tuples = ids.flatMap((id) => resourceTuples(id, 'p1', 'ann'));
    for (let from = 0; from < tuples.length; from += 100)
      await world.client.write({ writes: tuples.slice(from, from + 100) });

    const report = await auditOutbox(world.target);
    expect(report).toMatchObject({ partitionsCompared: 1_000, liveTuplesRead: 2_000, drifted: 0, candidates: 0 });
    // 2,000 tuples: 20 pages (and at most one empty page after the last).
    expect(report.reads.tuplePages).toBeGreaterThanOrEqual(20);
    expect(report.reads.tuplePages).toBeLessThanOrEqual(21);
    expect(report.reads.partitionReads).toBe(0);
  });

  test('an owner that maps an expected tuple to another partition is refused (repair would enqueue it out of order)', async () => {
    const world = await agreed();
    const wrong = { ...world.owner, partitionOf: () => 'vpc:elsewhere' };
    await expect(auditOutbox({ ...world.target, owner: wrong })).rejects.toThrow(OutboxConfigError);
    await expect(auditOutbox({ ...world.target, sampleSize: -1 })).rejects.toThrow(/sampleSize/);
  });
});

describe('auditOutboxIncremental', () => {
  let cursors = 0;
  async function cursorTable(): Promise<string> {
    cursors += 1;
    const table = `reconciler.audit_cursor_${cursors}`;
    await sql.raw(auditCursorTableDdl(table)).execute(t.db);
    return table;
  }

  test('finds an out-of-band edit made after its stored token, reading only the changelog and the changed partitions', async () => {
    const world = await agreed();
    const cursorTable_ = await cursorTable();
    const options = { ...world.target, cursorTable: cursorTable_ };

    // First run: no token yet, so a full audit, and a token stored from its start.
    const first = await auditOutboxIncremental(options);
    expect(first).toMatchObject({ mode: 'incremental', drifted: 0 });
    expect(first.reads.tuplePages).toBe(1);
    const stored = await sql<{ object_type: string; continuation_token: string | null }>`
      select object_type, continuation_token from ${sql.raw(cursorTable_)} where outbox = ${world.spec.table}`.execute(
      t.db,
    );
    expect(stored.rows).toEqual([{ object_type: 'vpc', continuation_token: expect.any(String) }]);

    // Nothing changed: one changelog page, no scan, no re-read.
    world.reader.calls.readObjectTypes = 0;
    const quiet = await auditOutboxIncremental(options);
    expect(quiet).toMatchObject({
      drifted: 0,
      partitionsCompared: 0,
      reads: { tuplePages: 0, partitionReads: 0, changePages: 1 },
    });

    // An out-of-band grant, and a delivery of the drainer (a change that is what the owner expects).
    await world.client.write({ writes: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:b' }] });
    await world.create('e');
    await world.drain();
    const found = await auditOutboxIncremental(options);
    expect(found).toMatchObject({ drifted: 1, partitionsCompared: 2, unexpected: { partitions: 1, tuples: 1 } });
    expect(found.unexpected.sample[0]?.tuples).toEqual([{ user: 'user:mallory', relation: 'viewer', object: 'vpc:b' }]);
    expect(found.reads.tuplePages).toBe(0);
    expect(found.reads.partitionReads).toBe(2); // vpc:b and vpc:e, nothing else
    expect(world.reader.calls.readObjectTypes).toBe(0);

    // The token moved on: the same edit is not read again (it is still there: a full audit reports it).
    const after = await auditOutboxIncremental(options);
    expect(after).toMatchObject({ drifted: 0, partitionsCompared: 0 });
    expect((await auditOutbox(world.target)).unexpected.tuples).toBe(1);
  });

  test('a type with no change since the first run keeps its start time, and the next change is found from it', async () => {
    const world = await auditWorld(t.db); // an empty owner and store: the changelog has nothing
    const options = { ...world.target, cursorTable: await cursorTable() };
    expect(await auditOutboxIncremental(options)).toMatchObject({ drifted: 0, partitionsCompared: 0 });
    const stored = await sql<{ continuation_token: string | null; start_time: Date | null }>`
      select continuation_token, start_time from ${sql.raw(options.cursorTable)}`.execute(t.db);
    expect(stored.rows).toEqual([{ continuation_token: null, start_time: expect.any(Date) }]);

    await world.client.write({ writes: [{ user: 'user:eve', relation: 'owner', object: 'vpc:ghost' }] });
    const found = await auditOutboxIncremental(options);
    expect(found).toMatchObject({ drifted: 1, orphans: { objects: 1 }, reads: { tuplePages: 0 } });
  });

  test('past scanAbove changed partitions it scans the store instead of re-reading each, and finds the same drift', async () => {
    const world = await agreed();
    const options = { ...world.target, cursorTable: await cursorTable() };
    await auditOutboxIncremental(options);
    await world.client.write({ writes: [{ user: 'user:mallory', relation: 'viewer', object: 'vpc:b' }] });
    await world.create('e');
    await world.drain();
    const scanned = await auditOutboxIncremental({ ...options, scanAbove: 1 });
    expect(scanned).toMatchObject({ mode: 'incremental', drifted: 1, unexpected: { partitions: 1, tuples: 1 } });
    expect(scanned.reads).toMatchObject({ tuplePages: 1, partitionReads: 1 }); // the scan, and the one drifted partition confirmed
    // The tokens moved on as after a re-read.
    expect(await auditOutboxIncremental(options)).toMatchObject({ drifted: 0, partitionsCompared: 0 });
  });

  test('without its cursor table it says how to create it', async () => {
    const world = await auditWorld(t.db);
    await expect(auditOutboxIncremental({ ...world.target, cursorTable: 'reconciler.no_such_cursor' })).rejects.toThrow(
      /reconciler\.no_such_cursor does not exist: create it in a migration with auditCursorTableDdl/,
    );
  });
});
