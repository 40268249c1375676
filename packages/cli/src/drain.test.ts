import { execFileSync } from 'node:child_process';
import { tableNames } from '@outbox/outbox/protocol';
import { freePort, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { createBacklogTable, enqueueIntent, register } from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { CLI_NODE_ARGS, jsonOf, OUTBOX_BIN, runCli } from './testing/run-outbox.js';

// drain against the real OpenFGA: what it delivers, what it poisons, its exit codes and its output.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const flags = (table: string) => [
  '--database-url',
  t.url,
  '--table',
  table,
  '--partition-column',
  'resource_id',
  '--max-attempts',
  '3',
];
/** A tuple OpenFGA refuses for good (the model has no such relation): the drainer poisons it at once. */
const refused = { writes: [{ user: 'user:alice', relation: 'no_such_relation', object: 'vpc:bad' }] };

describe('drain', () => {
  test('delivers what is deliverable, poisons what OpenFGA refuses, exits 1, and --json says exactly that', async () => {
    const spec = await createBacklogTable(t.db);
    for (const id of ['x', 'y', 'z']) await enqueueIntent(t.db, spec, `vpc:${id}`, register(id));
    await enqueueIntent(t.db, spec, 'vpc:bad', refused);
    const run = await runCli(['drain', '--json', ...flags(spec.table)], { env: openFgaEnv(fga) });
    expect(run.code, run.stderr).toBe(1);
    const doc = jsonOf(run);
    assertOutputSchema('drain', doc);
    expect(doc).toMatchObject({
      ok: false,
      outboxes: [
        {
          table: spec.table,
          passes: 1,
          delivered: 3,
          poisoned: 1,
          retried: 0,
          halted: false,
          haltReason: null,
          left: { deliverable: 0, poisoned: 1 },
        },
      ],
    });
    for (const id of ['x', 'y', 'z'])
      expect(
        (await fga.client.read({ user: 'user:alice', relation: 'owner', object: `vpc:${id}` })).tuples,
      ).toHaveLength(1);
    expect(run.stderr).not.toContain('\r'); // no progress bar without a terminal
  });

  test('the human summary: one line per outbox, the first delivered intents named; nothing left is exit 0', async () => {
    const spec = await createBacklogTable(t.db);
    const ids = [];
    for (const id of ['p', 'q']) ids.push(await enqueueIntent(t.db, spec, `vpc:${id}`, register(id)));
    const run = await runCli(['drain', ...flags(spec.table)], { env: openFgaEnv(fga) });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      `${spec.table}: delivered 2, retried 0, poisoned 0 in 1 pass; left 0 deliverable, 0 poisoned\n` +
        `  #${ids[0]} vpc:p: 2 write(s), 0 delete(s)\n  #${ids[1]} vpc:q: 2 write(s), 0 delete(s)\n`,
    );
    const again = await runCli(['drain', ...flags(spec.table)], { env: openFgaEnv(fga) });
    expect(again.stdout).toBe(
      `${spec.table}: delivered 0, retried 0, poisoned 0 in 1 pass; left 0 deliverable, 0 poisoned\n`,
    );
  });

  test('--until-empty runs passes until one delivers nothing, bounded by --max-passes', async () => {
    const spec = await createBacklogTable(t.db);
    await enqueueIntent(t.db, spec, 'vpc:u', register('u'));
    const until = jsonOf(
      await runCli(['drain', '--json', '--until-empty', ...flags(spec.table)], { env: openFgaEnv(fga) }),
    );
    expect(until).toMatchObject({ ok: true, outboxes: [{ passes: 2, delivered: 1 }] });
    await enqueueIntent(t.db, spec, 'vpc:v', register('v'));
    const bounded = jsonOf(
      await runCli(['drain', '--json', '--until-empty', '--max-passes', '1', ...flags(spec.table)], {
        env: openFgaEnv(fga),
      }),
    );
    expect(bounded).toMatchObject({ outboxes: [{ passes: 1, delivered: 1 }] });
  });

  test('an OpenFGA that does not answer is exit 3 before any attempt is counted', async () => {
    const spec = await createBacklogTable(t.db);
    await enqueueIntent(t.db, spec, 'vpc:w', register('w'));
    const port = await freePort();
    const run = await runCli(['drain', ...flags(spec.table)], { env: openFgaEnv(fga, `http://127.0.0.1:${port}`) });
    expect(run.code).toBe(3);
    expect(run.stderr).toMatch(
      new RegExp(
        `^outbox: OpenFGA at http://127\\.0\\.0\\.1:${port} did not answer: .+ \\(is it running, and is openfga\\.apiUrl right\\?\\)\\n$`,
      ),
    );
    const rows = await sql<{
      attempt_count: number;
    }>`select attempt_count from ${sql.raw(tableNames(spec).table)}`.execute(t.db);
    expect(rows.rows).toEqual([{ attempt_count: 0 }]);
  });

  test('a store that does not exist is configuration (exit 2); unset OpenFGA variables are named', async () => {
    const spec = await createBacklogTable(t.db);
    const wrongStore = await runCli(['drain', ...flags(spec.table)], {
      env: { ...openFgaEnv(fga), OPENFGA_STORE_ID: '01JBZZZZZZZZZZZZZZZZZZZZZZ', OPENFGA_MODEL_ID: '' },
    });
    expect(wrongStore.code).toBe(2);
    expect(wrongStore.stderr).toContain('has no store 01JBZZZZZZZZZZZZZZZZZZZZZZ');
    const unset = await runCli(['drain', ...flags(spec.table)]);
    expect(unset.code).toBe(2);
    expect(unset.stderr).toBe(
      'outbox: --table: openfga.apiUrl: environment variable OPENFGA_API_URL is not set (export OPENFGA_API_URL)\n',
    );
  });

  test('on a terminal, stderr shows a progress bar', async () => {
    const spec = await createBacklogTable(t.db);
    await enqueueIntent(t.db, spec, 'vpc:tty', register('tty'));
    const command = [process.execPath, ...CLI_NODE_ARGS, OUTBOX_BIN, 'drain', ...flags(spec.table)]
      .map((a) => `'${a}'`)
      .join(' ');
    // script(1) runs the command on a pseudo-terminal, as an operator's shell would.
    const output = execFileSync('script', ['-qec', command, '/dev/null'], {
      env: { PATH: process.env.PATH ?? '', ...openFgaEnv(fga) },
      encoding: 'utf8',
    });
    expect(output).toMatch(new RegExp(`\\r\\x1b\\[K${spec.table.replace('.', '\\.')} \\[#{24}\\] 1/1 `));
    expect(output).toContain(`${spec.table}: delivered 1`);
  });
});
