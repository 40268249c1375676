import { tableNames } from '@outbox/outbox/protocol';
import { createReconciler } from '@outbox/reconciler';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeEach, describe, expect, test } from 'vitest';
import { silentLogger } from './silent-logger.js';
import { createBacklogTable, deliver, deregister, enqueueIntent, poison, register } from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import type { OutboxSpec } from '@outbox/outbox';

// compact through the bin, on a ledger where each rule of docs/ledger.md ("What compaction keeps") decides a row.
const t = useTestDatabase();
let spec: OutboxSpec;
let ids: Record<'x1' | 'x2' | 'x3' | 'y1' | 'y2' | 'y3' | 'z1' | 'z2' | 'w1', string>;
const flags = () => ['--database-url', t.url, '--table', spec.table, '--partition-column', 'resource_id'];
const remaining = async () =>
  (
    await sql<{ id: string }>`select id::text from ${sql.raw(tableNames(spec).table)} order by id`.execute(t.db)
  ).rows.map((r) => r.id);

beforeEach(async () => {
  spec = await createBacklogTable(t.db);
  const delivered = async (key: string, payload: Parameters<typeof enqueueIntent>[3]) => {
    const id = await enqueueIntent(t.db, spec, key, payload);
    await deliver(t.db, spec, id);
    return id;
  };
  const poisoned = async (key: string, payload: Parameters<typeof enqueueIntent>[3]) => {
    const id = await enqueueIntent(t.db, spec, key, payload);
    await poison(t.db, spec, id, 'OpenFGA unreachable');
    return id;
  };
  const x1 = await delivered('vpc:x', register('x')); // deleted: older, and x3 is delivered after it
  const x2 = await delivered('vpc:x', deregister('x')); // deleted
  const x3 = await delivered('vpc:x', register('x')); // kept: the partition's last delivered row
  const y1 = await delivered('vpc:y', register('y')); // deleted: before y2, the partition's first pending row
  const y2 = await poisoned('vpc:y', deregister('y')); // kept: pending
  const y3 = await delivered('vpc:y', register('y')); // kept: after a pending row (and the last delivered)
  const z1 = await poisoned('vpc:z', register('z')); // retired below: closed, deleted with the closed retention
  const z2 = await delivered('vpc:z', deregister('z')); // kept: the last delivered
  const w1 = await poisoned('vpc:w', register('w')); // discarded below: closed, deleted
  const reconciler = createReconciler({ db: t.db, spec, logger: silentLogger });
  await reconciler.retire([z1], 'deregistered');
  await reconciler.discardPoisoned({ ids: [w1], reason: 'not wanted' });
  ids = { x1, x2, x3, y1, y2, y3, z1, z2, w1 };
});

describe('compact', () => {
  test('--dry-run --retention 0 counts what the rules let go, and deletes nothing', async () => {
    const before = await remaining();
    const run = await runCli(['compact', '--dry-run', '--retention', '0', '--json', ...flags()]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('compact', doc);
    expect(doc).toEqual({
      dryRun: true,
      retentionMs: 0,
      closedRetentionMs: 0,
      outboxes: [
        {
          name: spec.table,
          table: spec.table,
          deleted: 5,
          delivered: 3,
          closed: 2,
          scanned: 9,
          batches: 1,
          skipped: false,
        },
      ],
    });
    expect(await remaining()).toEqual(before);
  });

  test('--retention 0 deletes them; the rows a decision reads stay', async () => {
    const run = await runCli(['compact', '--retention', '0', ...flags()]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      [
        "deleting delivered rows of any age and retired or discarded rows of any age, except each partition's last delivered row and every row after its first pending one",
        `${spec.table}: deleted 5 row(s): 3 delivered, 2 retired or discarded; 9 scanned in 1 batch(es)`,
        '',
      ].join('\n'),
    );
    expect(await remaining()).toEqual([ids.x3, ids.y2, ids.y3, ids.z2]);
  });

  test('the default retention (30 days) keeps this young ledger whole; --closed-retention keeps the closed rows apart', async () => {
    const before = await remaining();
    const young = await runCli(['compact', '--dry-run', ...flags()]);
    expect(young.code, young.stderr).toBe(0);
    expect(young.stdout).toBe(
      [
        "would delete delivered rows sent more than 30d ago and retired or discarded rows closed more than 30d ago, except each partition's last delivered row and every row after its first pending one",
        `${spec.table}: would delete 0 row(s): 0 delivered, 0 retired or discarded; 9 scanned in 1 batch(es) (dry run: nothing deleted)`,
        '',
      ].join('\n'),
    );
    const delivered = jsonOf(
      await runCli([
        'compact',
        '--retention',
        '0',
        '--closed-retention',
        '1d12h',
        '--batch-size',
        '2',
        '--json',
        ...flags(),
      ]),
    );
    assertOutputSchema('compact', delivered);
    expect(delivered).toMatchObject({
      dryRun: false,
      retentionMs: 0,
      closedRetentionMs: 36 * 3_600_000,
      outboxes: [{ deleted: 3, delivered: 3, closed: 0, scanned: 9 }],
    });
    expect((delivered as { outboxes: { batches: number }[] }).outboxes[0]?.batches).toBe(5);
    expect(await remaining()).toEqual(before.filter((id) => ![ids.x1, ids.x2, ids.y1].includes(id)));
  });

  test('a bad duration or batch size is usage (exit 2), one line, before anything is read', async () => {
    for (const args of [
      ['--retention', '30x'],
      ['--retention', '1d1d'],
      ['--closed-retention', ''],
      ['--retention', '36501d'],
      ['--batch-size', '0'],
      ['--dry-rum'],
    ]) {
      const run = await runCli(['compact', ...args, ...flags()]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr.trimEnd().split('\n'), run.stderr).toHaveLength(1);
      expect(run.stdout).toBe('');
    }
    const bad = await runCli(['compact', '--retention', '30x', ...flags()]);
    expect(bad.stderr).toBe(
      "outbox: option '--retention <duration>' argument '30x' is invalid. expected a duration such as 30d, 12h, 1d12h, 90m, 45s or 0, at most 36500d. (see outbox compact --help)\n",
    );
  });

  test('a table that is not an outbox is exit 2 before any delete', async () => {
    await sql
      .raw('create table cli.not_an_outbox (id bigint primary key, resource_id text)')
      .execute(t.db)
      .catch(() => undefined);
    const run = await runCli([
      'compact',
      '--retention',
      '0',
      '--database-url',
      t.url,
      '--table',
      'cli.not_an_outbox',
      '--partition-column',
      'resource_id',
      '--max-attempts',
      '3',
    ]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(run.stderr).toContain('cli.not_an_outbox does not match the outbox contract');
  });
});
