import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { readOutboxActions, type OutboxActionEntry, type OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import {
  createBacklogTable,
  deliver,
  deregister,
  enqueueIntent,
  register,
  scriptedBacklog,
} from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import { createThingsTable, thingTuple } from './testing/things-owner.js';

// Every command that changes the ledger records one row of the outbox's actions log, with who,
// what, which ids, how many and why; a dry run, a refusal and a bad --actor record (and change) nothing.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const flags = (spec: OutboxSpec) => [
  '--database-url',
  t.url,
  '--table',
  spec.table,
  '--partition-column',
  'resource_id',
];
const cli = (spec: OutboxSpec, ...args: string[]) => runCli([...args, ...flags(spec)]);
const log = (spec: OutboxSpec) => readOutboxActions(t.db, spec);
const stateOf = async (spec: OutboxSpec, id: string) =>
  (jsonOf(await cli(spec, 'show', id, '--json')) as { state: string }).state;
const OS_USER = userInfo().username;

/** What a test compares of a log row: all but its id and time, which it checks apart. */
const entry = (e: OutboxActionEntry) => ({
  actor: e.actor,
  action: e.action,
  ids: e.ids,
  counts: e.counts,
  reason: e.reason,
});

describe('each change is one row of the actions log', () => {
  test('discard --actor: one row naming the actor, the ids, the count and the reason', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await cli(
      b.spec,
      'discard',
      b.refused,
      b.poisoned,
      '--reason',
      ' vpc deleted ',
      '--yes',
      '--actor',
      'alice',
    );
    expect(run.code, run.stderr).toBe(0);
    const [row, ...rest] = await log(b.spec);
    expect(rest).toEqual([]);
    expect(entry(row!)).toEqual({
      actor: 'alice',
      action: 'discard',
      ids: [b.poisoned, b.refused],
      counts: { discarded: 2 },
      reason: 'vpc deleted',
    });
    expect(row!.table).toBe(b.spec.table);
    expect(Math.abs(row!.at.getTime() - Date.now())).toBeLessThan(60_000);
  });

  test('retire without --actor records the OS user', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await cli(b.spec, 'retire', b.superseded, '--reason', 'deregistered during the outage', '--yes');
    expect(run.code, run.stderr).toBe(0);
    expect((await log(b.spec)).map(entry)).toEqual([
      {
        actor: OS_USER,
        action: 'retire',
        ids: [b.superseded],
        counts: { retired: 1 },
        reason: 'deregistered during the outage',
      },
    ]);
  });

  test('redrive: the revived ids and counts; --dry-run, and a redrive with nothing to change, record nothing', async () => {
    const b = await scriptedBacklog(t.db);
    const dry = await cli(b.spec, 'redrive', '--dry-run', '--refused', '--actor', 'bob');
    expect(dry.code, dry.stderr).toBe(0);
    expect(await log(b.spec)).toEqual([]);
    const run = await cli(b.spec, 'redrive', '--refused', '--actor', 'bob', '--json');
    expect(run.code, run.stderr).toBe(0);
    const revived = (jsonOf(run) as { outboxes: { revived: { id: string }[] }[] }).outboxes[0]!.revived.map(
      (r) => r.id,
    );
    expect([...revived].sort()).toEqual([b.poisoned, b.refused].sort());
    expect((await log(b.spec)).map(entry)).toEqual([
      { actor: 'bob', action: 'redrive', ids: revived, counts: { revived: 2, requested: 1 }, reason: null },
    ]);
    expect((await cli(b.spec, 'redrive', '--actor', 'bob')).code).toBe(0); // nothing left to revive
    expect(await log(b.spec)).toHaveLength(1);
  });

  test('compact: the counts it deleted; --dry-run records nothing', async () => {
    const spec = await createBacklogTable(t.db);
    for (const payload of [register('x'), deregister('x'), register('x')])
      await deliver(t.db, spec, await enqueueIntent(t.db, spec, 'vpc:x', payload));
    expect((await cli(spec, 'compact', '--retention', '0', '--dry-run')).code).toBe(0);
    expect(await log(spec)).toEqual([]);
    const run = await cli(spec, 'compact', '--retention', '0', '--actor', 'carol');
    expect(run.code, run.stderr).toBe(0);
    expect((await log(spec)).map(entry)).toEqual([
      { actor: 'carol', action: 'compact', ids: [], counts: { deleted: 2, delivered: 2, closed: 0 }, reason: null },
    ]);
  });

  test('repair --apply against OpenFGA: the enqueued ids and the counts; the dry run records nothing', async () => {
    const spec = await createBacklogTable(t.db);
    const things = `cli.things_${spec.tableName}`;
    await createThingsTable(t.db, things);
    await t.db.insertInto(things).values({ id: 'r1', project_id: 'p1' }).execute(); // its tuple is missing
    await fga.client.write({ writes: [thingTuple('r9', 'p1')] }); // an orphan: its row does not exist
    const owner = pathToFileURL(join(import.meta.dirname, 'testing/things-owner.ts')).href;
    const config = join(mkdtempSync(join(tmpdir(), 'outbox-cli-actions-')), 'outbox.config.ts');
    writeFileSync(
      config,
      `import { thingsOwner } from ${JSON.stringify(owner)};
       export default {
         databaseUrl: '$TEST_DATABASE_URL',
         openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID', apiToken: '\${OPENFGA_API_TOKEN:-}' },
         outboxes: { things: { table: ${JSON.stringify(spec.table)}, partitionColumn: 'resource_id', maxAttempts: 3, owner: thingsOwner(${JSON.stringify(things)}) } },
       };`,
    );
    const repair = (...args: string[]) =>
      runCli(['repair', '--config', config, ...args], { env: { TEST_DATABASE_URL: t.url, ...openFgaEnv(fga) } });
    expect((await repair('--actor', 'dave')).code).toBe(1); // planned, not applied
    expect(await log(spec)).toEqual([]);
    const run = await repair('--apply', '--actor', 'dave', '--json');
    expect(run.code, run.stderr).toBe(0);
    const enqueued = (jsonOf(run) as { outboxes: { enqueued: string[] }[] }).outboxes[0]!.enqueued;
    expect(enqueued).toHaveLength(2);
    expect((await log(spec)).map(entry)).toEqual([
      {
        actor: 'dave',
        action: 'repair',
        ids: enqueued,
        counts: { partitions: 2, intents: 2, writes: 1, deletes: 1 },
        reason: null,
      },
    ]);
  });
});

/** Each row's delivery, closing, attempts and revival request, in id order: what an action would change. */
const rowStates = async (spec: OutboxSpec) =>
  (
    await sql<{ id: string; state: string }>`select id::text,
      row(sent_at, retired_at, attempt_count, revive_requested)::text as state
      from ${sql.raw(tableNames(spec).table)} order by id`.execute(t.db)
  ).rows;

describe('nothing changed, nothing recorded', () => {
  test.each([
    ['an empty --actor', ''],
    ['a --actor with a newline', 'alice\nroot'],
    ['a --actor with an escape sequence', 'alice\u001b[31m'],
  ])('%s is exit 2 for every command that changes rows, before anything is changed', async (_what, actor) => {
    const b = await scriptedBacklog(t.db);
    const before = await rowStates(b.spec);
    for (const args of [
      ['discard', b.poisoned, '--reason', 'x', '--yes'],
      ['retire', b.superseded, '--reason', 'x', '--yes'],
      ['redrive', '--refused'],
      ['compact', '--retention', '0'],
      ['repair', '--apply'],
    ]) {
      const run = await cli(b.spec, ...args, '--actor', actor);
      expect(run.code, `${args[0]}: ${run.stderr}`).toBe(2);
      expect(run.stderr).toMatch(
        /^outbox: --actor: expected who acted: a name of 1 to 200 characters without control characters, got ".*" \(the actions log records who acted: pass --actor NAME\)\n$/,
      );
      expect(run.stdout).toBe('');
    }
    const after = await rowStates(b.spec);
    expect(after).toEqual(before);
    expect(await log(b.spec)).toEqual([]);
  });

  test('a missing or blank reason, and a refused discard, record nothing', async () => {
    const b = await scriptedBacklog(t.db);
    for (const args of [
      ['retire', b.superseded, '--yes'],
      ['retire', b.superseded, '--reason', '  ', '--yes'],
      ['discard', b.poisoned, '--reason', '', '--yes'],
    ]) {
      expect((await cli(b.spec, ...args, '--actor', 'alice')).code, args.join(' ')).toBe(2);
    }
    const refused = await cli(
      b.spec,
      'discard',
      b.poisoned,
      b.superseded,
      '--reason',
      'x',
      '--yes',
      '--actor',
      'alice',
    );
    expect(refused.code).toBe(1);
    expect(await stateOf(b.spec, b.poisoned)).toBe('poisoned');
    expect(await stateOf(b.spec, b.superseded)).toBe('superseded');
    expect(await log(b.spec)).toEqual([]);
  });
});

describe('outbox actions', () => {
  test('lists the log newest first; --json fits its schema; --limit says when older ones are left out', async () => {
    const b = await scriptedBacklog(t.db);
    expect((await cli(b.spec, 'actions')).stdout).toBe('no actions recorded\n');
    expect((await cli(b.spec, 'discard', b.poisoned, '--reason', 'not wanted', '--yes', '--actor', 'alice')).code).toBe(
      0,
    );
    expect((await cli(b.spec, 'retire', b.superseded, '--reason', 'superseded', '--yes', '--actor', 'bob')).code).toBe(
      0,
    );
    const run = await cli(b.spec, 'actions', '--json');
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('actions', doc);
    expect(doc).toEqual({
      outboxes: [
        {
          name: b.spec.table,
          table: b.spec.table,
          actions: [
            {
              id: expect.any(String),
              at: expect.any(String),
              actor: 'bob',
              action: 'retire',
              ids: [b.superseded],
              counts: { retired: 1 },
              reason: 'superseded',
            },
            {
              id: expect.any(String),
              at: expect.any(String),
              actor: 'alice',
              action: 'discard',
              ids: [b.poisoned],
              counts: { discarded: 1 },
              reason: 'not wanted',
            },
          ],
          more: false,
        },
      ],
    });
    const limited = jsonOf(await cli(b.spec, 'actions', '--json', '--limit', '1'));
    assertOutputSchema('actions', limited);
    expect(limited).toMatchObject({ outboxes: [{ actions: [{ actor: 'bob' }], more: true }] });
    const text = await cli(b.spec, 'actions');
    const lines = text.stdout
      .trimEnd()
      .split('\n')
      .map((line) => line.split(/ {2,}/));
    expect(lines).toEqual([
      ['at', 'outbox', 'actor', 'action', 'changed', 'reason'],
      [
        expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/),
        b.spec.table,
        'bob',
        'retire',
        `retired 1: #${b.superseded}`,
        'superseded',
      ],
      [expect.any(String), b.spec.table, 'alice', 'discard', `discarded 1: #${b.poisoned}`, 'not wanted'],
    ]);
  });

  test('on a table the migration has not given its log: exit 2, and doctor names the log', async () => {
    const spec = await createBacklogTable(t.db);
    await sql.raw(`drop table ${tableNames(spec).actionsTable}`).execute(t.db);
    const run = await cli(spec, 'actions');
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/does not exist \(run the migrations/);
    const doctor = jsonOf(await runCli(['doctor', '--json', ...flags(spec)], { env: openFgaEnv(fga) })) as {
      checks: { check: string; status: string; detail: string }[];
    };
    expect(doctor.checks.find((c) => c.check === 'table')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining(`table ${spec.table}_actions (the actions log;`),
    });
  });
});
