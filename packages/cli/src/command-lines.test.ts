import { fileURLToPath } from 'node:url';
import { createDatabase, dropDatabase, stackInfo, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { openFgaEnv } from './testing/openfga-env.js';
import { jsonOf, runCli } from './testing/run-outbox.js';

// The repository's own config (outbox.config.ts: the six services), and its other command lines
// on the same discipline: a service's fga:drain (a thin wrapper over `outbox drain`) and `pnpm migrate`.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const FGA_DRAIN = fileURLToPath(new URL('../../../services/vpc/src/fga-drain.ts', import.meta.url));
const MIGRATE = fileURLToPath(new URL('../../../migrations/src/cli.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../..', import.meta.url));

describe("the repository's outbox.config.ts", () => {
  test('status covers the six outboxes; doctor finds every table and migration in place; audit reads with the real owners', async () => {
    const env = { DATABASE_URL: t.url, ...openFgaEnv(fga) };
    const status = await runCli(['status', '--json'], { cwd: REPO, env });
    expect(status.code, status.stderr).toBe(0);
    expect(
      (jsonOf(status) as { outboxes: { name: string; table: string }[] }).outboxes.map((o) => `${o.name} ${o.table}`),
    ).toEqual([
      'iam iam.fga_outbox',
      'vpc vpc.fga_register_outbox',
      'compute compute.fga_register_outbox',
      'nlb nlb.fga_register_outbox',
      'storage storage.fga_register_outbox',
      'registry registry.fga_register_outbox',
    ]);
    const applied = (await t.db.selectFrom('public.kysely_migration').select('name').execute()).length;
    const doctor = await runCli(['doctor', '--json'], { cwd: REPO, env });
    expect(doctor.code, doctor.stdout).toBe(0);
    const checks = (jsonOf(doctor) as { checks: { check: string; status: string; detail: string }[] }).checks;
    expect(checks.filter((c) => c.check === 'table').map((c) => c.status)).toEqual(Array(6).fill('pass'));
    expect(checks.find((c) => c.check.startsWith('migrations'))).toMatchObject({
      status: 'pass',
      detail: `all ${applied} migrations applied`,
    });
    const audit = await runCli(['audit', '--json'], { cwd: REPO, env });
    expect(audit.code, audit.stderr).toBe(0);
    expect(
      (jsonOf(audit) as { outboxes: { objectTypes: string[] }[] }).outboxes.map((o) => o.objectTypes.join(',')),
    ).toEqual(['organization,project', 'vpc', 'instance', 'load_balancer', 'bucket', 'repository']);
  });
});

describe("a service's fga:drain", () => {
  test("--help is the drain command's, exit 0; an unknown flag is one line, exit 2", async () => {
    const help = await runCli(['--help'], { entry: FGA_DRAIN });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: fga:drain [options]');
    expect(help.stdout).toContain('--until-empty');
    expect(help.stdout).not.toContain('--config');
    const bad = await runCli(['--untill-empty'], { entry: FGA_DRAIN });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe(
      "fga:drain: unknown option '--untill-empty'; did you mean --until-empty? (see fga:drain --help)\n",
    );
  });

  test('a missing variable is one line naming it, exit 2', async () => {
    const run = await runCli([], { entry: FGA_DRAIN, env: openFgaEnv(fga) });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(
      'fga:drain: the vpc service: databaseUrl: environment variable DATABASE_URL is not set (export DATABASE_URL)\n',
    );
  });

  test.each([
    ['DATABASE_URL', 'outbox', 'the vpc service: databaseUrl is not a postgres:// URL: (not a URL)'],
    [
      'OPENFGA_API_URL',
      'openfga:8080',
      'the vpc service: openfga.apiUrl is not an http(s) URL (e.g. http://127.0.0.1:8080)',
    ],
    [
      'OPENFGA_API_URL',
      'http://',
      'the vpc service: openfga.apiUrl is not an http(s) URL (e.g. http://127.0.0.1:8080)',
    ],
    [
      'OPENFGA_STORE_ID',
      'outbox',
      'the vpc service: openfga.storeId is not an OpenFGA store id (a 26-character ULID): "outbox"',
    ],
    [
      'OPENFGA_MODEL_ID',
      'latest',
      'the vpc service: openfga.authorizationModelId is not an OpenFGA model id (a 26-character ULID): "latest"',
    ],
  ])('a malformed %s (%s) is a configuration error: one line, exit 2', async (name, value, line) => {
    const run = await runCli([], { entry: FGA_DRAIN, env: { DATABASE_URL: t.url, ...openFgaEnv(fga), [name]: value } });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toBe(`fga:drain: ${line}\n`);
    expect(run.stdout).toBe('');
  });

  test("drains the service's own outbox; exit 1 when it poisoned an intent", async () => {
    await t.db
      .insertInto('vpc.fga_register_outbox')
      .values({
        resource_id: 'vpc:refused',
        payload: JSON.stringify({ writes: [{ user: 'user:a', relation: 'no_such_relation', object: 'vpc:refused' }] }),
        is_head: true,
      })
      .execute();
    const run = await runCli(['--json'], { entry: FGA_DRAIN, env: { DATABASE_URL: t.url, ...openFgaEnv(fga) } });
    expect(run.code, run.stderr).toBe(1);
    expect(jsonOf(run)).toMatchObject({
      ok: false,
      outboxes: [{ name: 'vpc', table: 'vpc.fga_register_outbox', poisoned: 1, delivered: 0 }],
    });
  });
});

describe('pnpm migrate', () => {
  test('a mistyped flag is refused (exit 2) before anything is migrated', async () => {
    const name = `cli_migrate_${process.pid}`;
    const url = await createDatabase(stackInfo().postgresUrl, name);
    const run = await runCli(['--sql-onyl'], { entry: MIGRATE, env: { DATABASE_URL: url } });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe("migrate: unknown option '--sql-onyl'; did you mean --sql-only? (see migrate --help)\n");
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      expect(
        (await client.query("select count(*)::int as n from pg_namespace where nspname in ('iam', 'vpc')")).rows[0],
      ).toEqual({ n: 0 });
    } finally {
      await client.end();
      await dropDatabase(stackInfo().postgresUrl, name);
    }
  });

  test('--help lists the flag and the variables; a missing variable is one line, exit 2', async () => {
    const help = await runCli(['--help'], { entry: MIGRATE });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--sql-only');
    expect(help.stdout).toContain('DATABASE_URL        required');
    const missing = await runCli([], { entry: MIGRATE });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(
      'migrate: DATABASE_URL is not set (export it; see "pnpm migrate" in services/README.md)\n',
    );
  });
});
