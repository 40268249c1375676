import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { createBacklogTable } from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import type { OutboxSpec } from '@outbox/outbox';
import pg from 'pg';

// doctor: one line per check, pass or fail with what to do, exit 1 on a failure.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let spec: OutboxSpec;
let dir: string;

interface Doc {
  ok: boolean;
  checks: { outbox: string | null; check: string; status: string; detail: string; fix: string | null }[];
}
const byCheck = (doc: Doc, prefix: string) => doc.checks.find((c) => c.check.startsWith(prefix));

function configWith(name: string, extra: Record<string, unknown>, outbox: Record<string, unknown> = {}): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    JSON.stringify({
      databaseUrl: '$TEST_DATABASE_URL',
      openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID', apiToken: '${OPENFGA_API_TOKEN:-}' },
      outboxes: { things: { table: spec.table, partitionColumn: 'resource_id', maxAttempts: 3, ...outbox } },
      ...extra,
    }),
  );
  return path;
}
const doctor = (config: string, ...args: string[]) =>
  runCli(['doctor', '--config', config, ...args], { env: { TEST_DATABASE_URL: t.url, ...openFgaEnv(fga) } });

beforeAll(async () => {
  spec = await createBacklogTable(t.db);
  dir = mkdtempSync(join(tmpdir(), 'outbox-cli-doctor-'));
});

describe('doctor', () => {
  test('a sound setup passes every check (exit 0); nobody LISTENs, which is a warning; --json fits its schema', async () => {
    const run = await doctor(configWith('ok.json', {}), '--json');
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const doc = jsonOf(run) as Doc;
    assertOutputSchema('doctor', doc);
    expect(doc.ok).toBe(true);
    expect(doc.checks.map((c) => [c.outbox, c.check.replace(/ \(.*\)$/, ''), c.status])).toEqual([
      ['things', 'table', 'pass'],
      ['things', 'partition column', 'pass'],
      ['things', 'listen channel', 'warn'],
      [null, 'migrations', 'skip'],
      [null, 'long transactions', 'pass'],
      [null, 'openfga', 'pass'],
    ]);
    expect(byCheck(doc, 'openfga')?.detail).toContain(`store ${fga.storeId}`);
    expect(byCheck(doc, 'migrations')?.check).toMatch(/:\*\*\*@/);
  });

  test('a listening drainer turns the channel check into a pass', async () => {
    const listener = new pg.Client({ connectionString: t.url });
    await listener.connect();
    try {
      await listener.query(`listen "${spec.channel}"`);
      const doc = jsonOf(await doctor(configWith('ok.json', {}), '--json')) as Doc;
      expect(byCheck(doc, 'listen channel')).toMatchObject({
        status: 'pass',
        detail: `1 session(s) LISTEN on ${spec.channel}: drainers wake on each commit`,
      });
    } finally {
      await listener.end();
    }
  });

  test('a spec on the wrong partition column fails naming both columns and what to set; exit 1', async () => {
    const run = await doctor(configWith('wrong-column.json', {}, { partitionColumn: 'tuple_key' }));
    expect(run.code).toBe(1);
    expect(run.stdout).toContain('FAIL  things: table: ');
    expect(run.stdout).toContain(
      `FAIL  things: partition column: the spec says tuple_key, the table's partition-head index is on resource_id\n      → set partitionColumn: 'resource_id' in the config`,
    );
  });

  test('migrations: one the code ships and the database lacks fails; one the database has and the code does not warns', async () => {
    const applied = (
      await sql<{ name: string }>`select name from public.kysely_migration order by name`.execute(t.db)
    ).rows.map((r) => r.name);
    const ahead = jsonOf(
      await doctor(configWith('ahead.json', { migrations: { names: [...applied, '9999_future'] } }), '--json'),
    ) as Doc;
    expect(byCheck(ahead, 'migrations')).toMatchObject({
      status: 'fail',
      detail: '1 migration(s) not applied: 9999_future',
    });
    expect(ahead.ok).toBe(false);
    const behind = jsonOf(
      await doctor(configWith('behind.json', { migrations: { names: applied.slice(0, -1) } }), '--json'),
    ) as Doc;
    expect(byCheck(behind, 'migrations')).toMatchObject({
      status: 'warn',
      detail: `applied migrations this code does not ship: ${applied.at(-1)}`,
    });
    const same = jsonOf(await doctor(configWith('same.json', { migrations: { names: applied } }), '--json')) as Doc;
    expect(byCheck(same, 'migrations')).toMatchObject({
      status: 'pass',
      detail: `all ${applied.length} migrations applied`,
    });
  });

  test('a transaction holding a snapshot fails the long-transaction check with its pid', async () => {
    const holder = new pg.Client({ connectionString: t.url, application_name: 'stuck-report' });
    await holder.connect();
    try {
      await holder.query('begin isolation level repeatable read');
      await holder.query('select 1');
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      const run = await doctor(configWith('ok.json', {}), '--long-transaction-minutes', '0');
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(
        new RegExp(
          `FAIL  long transactions \\(.*\\): transactions older than 0 min hold back vacuum: .*pid ${pid} stuck-report \\(idle in transaction\\) 0 min`,
        ),
      );
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
  });
});
