import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { freePort, useTestDatabase } from '@outbox/test-stack';
import { beforeAll, describe, expect, test } from 'vitest';
import { createBacklogTable, enqueueIntent, register } from './testing/backlog.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import type { OutboxSpec } from '@outbox/outbox';

// Config files, env references, flags and what a fault in each prints: always one line, exit 2.
const t = useTestDatabase();
let spec: OutboxSpec;
let dir: string;

const outboxFields = () => ({ table: spec.table, partitionColumn: 'resource_id', maxAttempts: 3 });
function writeConfig(name: string, content: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}
const oneLine = (stderr: string) => {
  expect(stderr.endsWith('\n') && stderr.trimEnd().split('\n').length === 1, stderr).toBe(true);
  return stderr.trimEnd();
};

beforeAll(async () => {
  spec = await createBacklogTable(t.db);
  await enqueueIntent(t.db, spec, 'vpc:a', register('a'));
  dir = mkdtempSync(join(tmpdir(), 'outbox-cli-config-'));
});

describe('a config file', () => {
  test('is found upward from the working directory; env references resolve; the password is masked in the output', async () => {
    const root = mkdtempSync(join(tmpdir(), 'outbox-cli-upward-'));
    writeFileSync(
      join(root, 'outbox.config.json'),
      JSON.stringify({ databaseUrl: '${TEST_DATABASE_URL}', outboxes: { things: outboxFields() } }),
    );
    const cwd = join(root, 'a', 'b');
    mkdirSync(cwd, { recursive: true });
    const run = await runCli(['status', '--json'], { cwd, env: { TEST_DATABASE_URL: t.url } });
    expect(run.code, run.stderr).toBe(0);
    const [outbox] = (jsonOf(run) as { outboxes: { name: string; pending: number; database: string }[] }).outboxes;
    expect(outbox).toMatchObject({ name: 'things', pending: 1 });
    const url = new URL(t.url);
    expect(url.password).not.toBe('');
    expect(outbox?.database).toBe(t.url.replace(`:${url.password}@`, ':***@'));
    expect(run.stdout).not.toContain(`:${url.password}@`);
  });

  test('a missing variable names itself and the field (exit 2, one line)', async () => {
    const path = writeConfig('missing-var.json', {
      databaseUrl: '$NOT_SET_ANYWHERE',
      outboxes: { things: outboxFields() },
    });
    const run = await runCli(['status', '--config', path]);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toBe(
      `outbox: ${path}: databaseUrl: environment variable NOT_SET_ANYWHERE is not set (export NOT_SET_ANYWHERE)`,
    );
  });

  test.each([
    [
      'an empty partition column',
      { partitionColumn: '' },
      'outboxes.things.partitionColumn: is required and has no default',
    ],
    ['a misspelt field', { tabel: 'x.y' }, 'outboxes.things.tabel: unknown field'],
    ['maxAttempts out of range', { maxAttempts: 0 }, 'outboxes.things.maxAttempts: expected an integer from 1 to 1000'],
    ['a table without a schema', { table: 'outbox' }, 'outboxes.things.table: expected "<schema>.<table>"'],
  ])('%s is refused naming the field (exit 2, one line)', async (_what, change, message) => {
    const path = writeConfig('bad-field.json', {
      databaseUrl: t.url,
      outboxes: { things: { ...outboxFields(), ...change } },
    });
    const run = await runCli(['status', '--config', path]);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toContain(`outbox: ${path}: ${message}`);
  });

  test('an owner in JSON is refused (owners are code); bad JSON is one line', async () => {
    const owner = await runCli([
      'status',
      '--config',
      writeConfig('owner.json', { databaseUrl: t.url, outboxes: { things: { ...outboxFields(), owner: {} } } }),
    ]);
    expect(owner.code).toBe(2);
    expect(oneLine(owner.stderr)).toContain('outboxes.things.owner: an owner is code');
    const broken = await runCli(['status', '--config', writeConfig('broken.json', '{ "outboxes": ')]);
    expect(broken.code).toBe(2);
    expect(oneLine(broken.stderr)).toContain('not valid JSON');
  });

  test('a .mjs config may give the spec object from defineOutbox; a config that throws is one line', async () => {
    const outboxModule = pathToFileURL(join(import.meta.dirname, '../../outbox/src/index.ts')).href;
    const path = writeConfig(
      'spec.mjs',
      `import { defineOutbox } from ${JSON.stringify(outboxModule)};
       export default { databaseUrl: process.env.TEST_DATABASE_URL, outboxes: { things: { spec: defineOutbox(${JSON.stringify(outboxFields())}) } } };`,
    );
    const run = await runCli(['status', '--json', '--config', path], { env: { TEST_DATABASE_URL: t.url } });
    expect(run.code, run.stderr).toBe(0);
    expect((jsonOf(run) as { outboxes: { pending: number }[] }).outboxes[0]?.pending).toBe(1);

    const throwing = writeConfig('throws.mjs', `throw new Error('no such secret store');`);
    const failed = await runCli(['status', '--config', throwing]);
    expect(failed.code).toBe(2);
    expect(oneLine(failed.stderr)).toBe(
      `outbox: ${throwing} failed to load: no such secret store (run it with \`node\` to see the whole error)`,
    );
  });

  test('--outbox picks by name; an unknown name lists the known ones; show refuses two outboxes', async () => {
    const path = writeConfig('two.json', {
      databaseUrl: t.url,
      outboxes: { one: outboxFields(), two: outboxFields() },
    });
    const picked = await runCli(['status', '--json', '--config', path, '--outbox', 'two']);
    expect((jsonOf(picked) as { outboxes: { name: string }[] }).outboxes.map((o) => o.name)).toEqual(['two']);
    const unknown = await runCli(['status', '--config', path, '--outbox', 'three']);
    expect(unknown.code).toBe(2);
    expect(oneLine(unknown.stderr)).toBe(`outbox: no outbox named "three" in ${path} (have: one, two)`);
    const show = await runCli(['show', '1', '--config', path]);
    expect(show.code).toBe(2);
    expect(oneLine(show.stderr)).toBe(
      'outbox: show works on one outbox, and 2 are selected (pass --outbox with one of: one, two)',
    );
  });

  test('no config anywhere is exit 2, saying where it looked', async () => {
    const run = await runCli(['status'], { cwd: mkdtempSync(join(tmpdir(), 'outbox-cli-none-')) });
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toMatch(
      /^outbox: no config file found \(looked for outbox\.config\.ts, outbox\.config\.mjs, outbox\.config\.json from .* up\)/,
    );
  });
});

describe('usage', () => {
  test.each([
    [['status', '--jsno'], "outbox: unknown option '--jsno'; did you mean --json? (see outbox status --help)"],
    [['stauts'], "outbox: unknown command 'stauts'; did you mean status? (see outbox --help)"],
    [
      ['status', 'extra'],
      "outbox: too many arguments for 'status'. Expected 0 arguments but got 1: extra. (see outbox status --help)",
    ],
    [['retire', '7', '--yes'], "outbox: required option '--reason <text>' not specified (see outbox retire --help)"],
    [
      ['status', '--table', 'a.b'],
      'outbox: without a config file, --database-url and --partition-column are needed too (or pass --config)',
    ],
  ])('%j is exit 2 with one line', async (args, line) => {
    const run = await runCli(args);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toBe(line);
    expect(run.stdout).toBe('');
  });

  // One test a command: each spawns the CLI through tsx, a few seconds apiece on a loaded machine.
  test.each([
    'status',
    'list',
    'show',
    'token',
    'drain',
    'redrive',
    'retire',
    'discard',
    'compact',
    'audit',
    'repair',
    'actions',
    'console',
    'doctor',
  ])('%s --help prints its usage and exits 0', async (command) => {
    const run = await runCli([command, '--help']);
    expect(run.code, command).toBe(0);
    expect(run.stdout).toContain(`Usage: outbox ${command} [options]`);
  });
  test("--version prints the CLI package's version, exit 0", async () => {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    const run = await runCli(['--version']);
    expect(run).toEqual({ code: 0, stdout: `${manifest.version}\n`, stderr: '' });
  });

  test('compact --help shows its retention default as written (30d)', async () => {
    const run = await runCli(['compact', '--help']);
    expect(run.code).toBe(0);
    expect(run.stdout.replace(/\s+/g, ' ')).toContain(
      'keep delivered rows this long (30d, 12h, 90m, 0) (default: 30d)',
    );
    expect(run.stdout).not.toContain(String(30 * 86_400_000));
  });

  test('show, retire and discard offer --outbox once; a second one is usage (exit 2)', async () => {
    for (const command of ['show', 'retire', 'discard']) {
      const help = await runCli([command, '--help']);
      expect(help.stdout, command).toMatch(/--outbox <name> +the outbox of the config to work on/);
      expect(help.stdout, command).not.toContain('repeat for several');
    }
    const run = await runCli(['show', '1', '--outbox', 'a', '--outbox', 'b']);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toBe(
      "outbox: option '--outbox <name>' argument 'b' is invalid. this command works on one outbox: give --outbox once (got a and b) (see outbox show --help)",
    );
  });
});

describe('an unreachable server', () => {
  test('Postgres refusing the connection is exit 3, one line, password masked', async () => {
    const port = await freePort();
    const run = await runCli([
      'status',
      '--database-url',
      `postgres://operator:hunter2@127.0.0.1:${port}/platform`,
      '--table',
      spec.table,
      '--partition-column',
      'resource_id',
    ]);
    expect(run.code).toBe(3);
    expect(oneLine(run.stderr)).toBe(
      `outbox: Postgres at postgres://operator:***@127.0.0.1:${port}/platform did not answer: connect ECONNREFUSED 127.0.0.1:${port} (is it running, and is the URL right?)`,
    );
  });

  test('a wrong password is configuration (exit 2), and is not printed', async () => {
    const url = new URL(t.url);
    url.password = 'not-the-password';
    const run = await runCli([
      'status',
      '--database-url',
      url.toString(),
      '--table',
      spec.table,
      '--partition-column',
      'resource_id',
    ]);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toContain(':***@');
    expect(run.stderr).not.toContain('not-the-password');
  });
});
