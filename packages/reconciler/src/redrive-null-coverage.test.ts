import { sql } from 'kysely';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import {
  createTestOutbox,
  deliver,
  enqueueIntent,
  poison,
  readRow,
  recordingLogger,
} from './testing/outbox-fixture.js';

// A coverage fragment that is NULL for a pair parks the row: a wrong parking is seen, a wrong revival is not.
const t = useTestDatabase();
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

describe('coverage SQL that evaluates to NULL', () => {
  test('a row without the field the coverage reads is not revived over a delivered successor (NULL coverage parks, it does not revive)', async () => {
    // The README's own example fragment. A row written before the service added `relations` (or by
    // hand) has none: `s.relations @> NULL` is NULL.
    const spec = await createTestOutbox(t.db, {
      partitionColumn: 'tuple_key',
      supersededCoverageSql: `(s.payload->'relations') @> (t.payload->'relations')`,
    });
    const key = 'user:alice|project:p1';
    const tuple = (relation: string) => ({ user: 'user:alice', relation, object: 'project:p1' });
    // Older build: revoke editor, no `relations` summary. Poisoned (OpenFGA was down).
    const old = await enqueueIntent(t.db, spec, key, { deletes: [tuple('editor')] });
    // Newer build: the whole state {editor, viewer}. Delivered.
    const later = await enqueueIntent(t.db, spec, key, {
      writes: [tuple('editor'), tuple('viewer')],
      relations: ['editor', 'viewer'],
    });
    await poison(t.db, spec, old);
    await deliver(t.db, spec, later);

    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
    // Reviving `old` replays "delete editor" over the delivered grant of editor: it undoes the later
    // delivery (§6), silently and for good.
    expect(ids(result.revived)).toEqual([]);
    expect(ids(result.superseded)).toEqual([old]);
    expect(await readRow(t.db, spec, old)).toMatchObject({ attempt_count: spec.maxAttempts });
  });

  test('a delivered successor without the field (written by hand) parks the poisoned row too', async () => {
    const spec = await createTestOutbox(t.db, {
      partitionColumn: 'tuple_key',
      supersededCoverageSql: `(s.payload->'relations') @> (t.payload->'relations')`,
    });
    const key = 'user:bob|project:p1';
    const tuple = (relation: string) => ({ user: 'user:bob', relation, object: 'project:p1' });
    const grant = await enqueueIntent(t.db, spec, key, { writes: [tuple('owner')], relations: ['owner'] });
    const names = tableNames(spec);
    // An operator revoked by hand (a row without `relations`) and the drainer delivered it.
    const revoke = await enqueueIntent(t.db, spec, key, { deletes: [tuple('owner')] });
    await poison(t.db, spec, grant);
    await deliver(t.db, spec, revoke);
    expect(
      (
        await sql<{
          r: unknown;
        }>`select payload->'relations' as r from ${sql.raw(names.table)} where id = ${revoke}`.execute(t.db)
      ).rows[0]?.r,
    ).toBeNull();

    const result = await createReconciler({ db: t.db, spec, logger: recordingLogger() }).redrivePoisoned();
    expect(ids(result.revived)).toEqual([]);
    expect(ids(result.superseded)).toEqual([grant]);
  });
});
