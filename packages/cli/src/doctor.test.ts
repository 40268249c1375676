import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { createBacklogTable } from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import type { OutboxSpec } from '@outbox/outbox';
import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';

// doctor: one line per check, pass or fail with what to do, exit 1 on a failure.
const t = useTestDatabase();
const fga = useOpenFgaStore();
let spec: OutboxSpec;
let dir: string;

interface Doc {
  ok: boolean;
  checks: {
    outbox: string | null;
    check: string;
    status: string;
    detail: string;
    fix: string | null;
    sql: string | null;
  }[];
}
const byCheck = (doc: Doc, prefix: string) => doc.checks.find((c) => c.check.startsWith(prefix));

function configWith(
  name: string,
  extra: Record<string, unknown>,
  outbox: Record<string, unknown> = {},
  table = spec.table,
): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    JSON.stringify({
      databaseUrl: '$TEST_DATABASE_URL',
      openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID', apiToken: '${OPENFGA_API_TOKEN:-}' },
      outboxes: { things: { table, partitionColumn: 'resource_id', maxAttempts: 3, ...outbox } },
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
    expect(run.stdout).toContain(
      `FAIL  things: table: ${spec.table}: missing or wrong: column tuple_key text (the spec's partitionColumn);`,
    );
    expect(run.stdout).toContain(
      "→ the table has no tuple_key column, the spec's partitionColumn: fix the spec (the partition column check names the table's), or point it at the right table\n",
    );
    expect(run.stdout).not.toContain('alter table'); // no DDL for a column the spec misnames
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

  test('a transaction holding a snapshot fails the long-transaction check, naming the oldest holder and the SQL that ends it', async () => {
    const holder = new pg.Client({ connectionString: t.url, application_name: 'stuck-report' });
    holder.on('error', () => undefined); // terminated below
    await holder.connect();
    try {
      await holder.query('begin isolation level repeatable read');
      await holder.query('select 1');
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      await sleep(2_100); // older than anything the CLI's own sessions, or another test's, hold
      const run = await doctor(configWith('ok.json', {}), '--long-transaction-minutes', '0');
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(
        new RegExp(
          `FAIL  long transactions \\(.*\\): the oldest transaction holding back vacuum: pid ${pid}, application_name "stuck-report", idle in transaction, in ${t.name}, open [2-9] s`,
        ),
      );
      expect(run.stdout).toContain(`→ end it with the SQL below`);
      expect(run.stdout).toContain(`\n        select pg_terminate_backend(${pid});\n`);
      const json = jsonOf(await doctor(configWith('ok.json', {}), '--long-transaction-minutes', '0', '--json')) as Doc;
      expect(byCheck(json, 'long transactions')).toMatchObject({
        status: 'fail',
        sql: `select pg_terminate_backend(${pid});`,
      });
      // Not yet older than the default 5 minutes.
      const later = await doctor(configWith('ok.json', {}), '--json');
      expect(byCheck(jsonOf(later) as Doc, 'long transactions')).toMatchObject({ status: 'pass' });
      // The SQL, run as printed, ends it.
      await sql.raw(`select pg_terminate_backend(${pid})`).execute(t.db);
      await expect(holder.query('select 1')).rejects.toThrow();
    } finally {
      await holder.end().catch(() => undefined);
    }
  });

  test("another database's snapshot does not hold back this one's vacuum; its transaction id does", async () => {
    const other = new URL(t.url);
    other.pathname = '/postgres';
    const elsewhere = new pg.Client({ connectionString: other.toString(), application_name: 'other-database' });
    const here = new pg.Client({ connectionString: t.url, application_name: 'this-database' });
    await elsewhere.connect();
    await here.connect();
    elsewhere.on('error', () => undefined);
    try {
      const pidOf = async (client: pg.Client) =>
        (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      const [elsewherePid, herePid] = [await pidOf(elsewhere), await pidOf(here)];
      await elsewhere.query('begin isolation level repeatable read');
      await elsewhere.query('select 1'); // a snapshot only
      await sleep(1_100);
      await here.query('begin isolation level repeatable read');
      await here.query('select 1');
      await sleep(1_100);
      const oldest = async () => {
        const run = await doctor(configWith('ok.json', {}), '--long-transaction-minutes', '0', '--json');
        return byCheck(jsonOf(run) as Doc, 'long transactions');
      };
      // The older snapshot is in another database: this database's vacuum does not wait for it.
      expect((await oldest())?.detail).toMatch(
        new RegExp(`^the oldest transaction holding back vacuum: pid ${herePid}, `),
      );
      // Once it writes, it has a transaction id, which every snapshot here counts as running.
      await elsewhere.query('select pg_current_xact_id()');
      expect((await oldest())?.detail).toMatch(
        new RegExp(
          `^the oldest transaction holding back vacuum: pid ${elsewherePid}, application_name "other-database", idle in transaction, in postgres, `,
        ),
      );
    } finally {
      await elsewhere.query('rollback').catch(() => undefined);
      await here.query('rollback').catch(() => undefined);
      await Promise.all([elsewhere.end(), here.end()]);
    }
  });
});

/** The SQL doctor printed under its table check, exactly as a terminal shows it (indented). */
function printedSql(stdout: string): string {
  const lines = stdout.split('\n');
  const from = lines.findIndex((line) => line.startsWith('FAIL  things: table: ')) + 2;
  const to = lines.findIndex((line, i) => i >= from && !line.startsWith('        '));
  return lines.slice(from, to).join('\n');
}

describe('doctor names what is missing and prints the DDL that recreates it', () => {
  /**
   * A fresh outbox with `drop` applied: doctor fails naming each of `named`, prints SQL (its --json
   * the same); the SQL, run as printed, makes every check pass again.
   */
  async function dropAndRepair(
    drop: (n: ReturnType<typeof tableNames>) => string[],
    named: (broken: OutboxSpec) => readonly string[],
  ) {
    const broken = await createBacklogTable(t.db);
    const names = tableNames(broken);
    const config = configWith(`${broken.tableName}.json`, {}, {}, broken.table);
    for (const statement of drop(names)) await sql.raw(statement).execute(t.db);

    const run = await doctor(config);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    const lines = run.stdout.split('\n');
    const at = lines.findIndex((line) => line.startsWith('FAIL  things: table: '));
    const [tableLine, fixLine] = [lines[at], lines[at + 1]];
    expect(tableLine).toContain(`FAIL  things: table: ${broken.table}: missing or wrong: `);
    for (const gap of named(broken)) expect(tableLine).toContain(gap);
    expect(fixLine).toMatch(/^ {6}→ run the SQL below, the migrations' own DDL for what is missing/);
    expect(run.stdout).not.toContain('createOutboxTable / createDrainFunctions');
    const script = printedSql(run.stdout);
    const json = byCheck(jsonOf(await doctor(config, '--json')) as Doc, 'table');
    expect(script.replace(/^ {8}/gm, '')).toBe(json?.sql);

    const client = new pg.Client({ connectionString: t.url });
    await client.connect();
    try {
      await client.query(script);
    } finally {
      await client.end();
    }
    const after = jsonOf(await doctor(config, '--json')) as Doc;
    assertOutputSchema('doctor', after);
    expect(after.checks.filter((c) => c.outbox === 'things').map((c) => [c.check, c.status])).toEqual([
      ['table', 'pass'],
      ['partition column', 'pass'],
      ['listen channel', 'warn'],
    ]);
    return script;
  }

  test('a dropped NOTIFY trigger: named, and recreated (its function replaced, not created twice)', async () => {
    const script = await dropAndRepair(
      (names) => [`drop trigger "${names.notifyTrigger}" on ${names.table}`],
      (broken) => [`statement-level AFTER INSERT trigger calling pg_notify('${broken.channel}', '')`],
    );
    expect(script).toContain('create or replace function');
    expect(script).toContain('create trigger');
  });

  test('a dropped partition-head index: named by its columns and predicate, and recreated', async () => {
    const script = await dropAndRepair(
      (names) => [`drop index ${names.table.split('.')[0]}."${names.partitionHeadIndex}"`],
      () => ['partial index (resource_id, id) where sent_at is null and retired_at is null (partition head)'],
    );
    expect(script).toMatch(/create index "[a-z0-9_]+_partition_head_idx"/);
  });

  test('a dropped enqueue function: named, and recreated as this release creates it', async () => {
    const script = await dropAndRepair(
      (names) => [`drop function ${names.enqueueFunction}`],
      (broken) => [`function ${broken.table}_enqueue (enqueue;`],
    );
    expect(script).toMatch(/create or replace function "cli"\."[a-z0-9_]+_enqueue"\(/);
  });

  test('a dropped actions log: named, and recreated as the migrations create it', async () => {
    const script = await dropAndRepair(
      (names) => [`drop table ${names.actionsTable}`],
      (broken) => [`table ${broken.table}_actions (the actions log;`],
    );
    expect(script).toMatch(/^ *create table if not exists "cli"\."[a-z0-9_]+_actions" \(/m);
  });

  test('a dropped table: named, and the whole DDL printed (its functions, which outlive it, replaced)', async () => {
    await dropAndRepair(
      (names) => [`drop table ${names.table}`],
      (broken) => [`the table ${broken.table} itself (it does not exist)`],
    );
  });

  test('several gaps at once — indexes, the drainer functions, a column, a NOTIFY on another channel — one script', async () => {
    await dropAndRepair(
      (names) => [
        `drop index ${names.table.split('.')[0]}."${names.pendingIndex}"`,
        `drop index ${names.table.split('.')[0]}."${names.claimIndex}"`,
        `drop index ${names.table.split('.')[0]}."${names.deliveredIndex}"`,
        `drop function ${names.claimFunction}`,
        `drop function ${names.settleFunction}`,
        `alter table ${names.table} drop column retired_reason, drop column verify_after`,
        `create or replace function ${names.notifyFunction}() returns trigger language plpgsql as $$ begin perform pg_notify('elsewhere', ''); return null; end $$`,
      ],
      (broken) => [
        'column retired_reason text',
        'column verify_after timestamp with time zone',
        'partial index (id) where sent_at is null and retired_at is null (pending)',
        "partial index (next_attempt_at, id) where is_head (the drainer's claim)",
        'partial index (verify_after) where verify_after is not null (late-write verification)',
        'partial index (resource_id, id) where sent_at is not null',
        'AFTER INSERT trigger',
        `function ${broken.table}_claim (`,
        `function ${broken.table}_settle (`,
      ],
    );
  });
});
