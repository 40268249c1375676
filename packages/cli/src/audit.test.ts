import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { freePort, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { createBacklogTable } from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';
import { createThingsTable, thingTuple } from './testing/things-owner.js';
import type { OutboxSpec } from '@outbox/outbox';

// audit and repair through the bin, with an owner from a .ts config, against the real OpenFGA:
// drift found (exit 1), planned, enqueued, delivered, and gone.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const THINGS = 'cli.things';
let spec: OutboxSpec;
let config: string;
let noOwner: string;

beforeAll(async () => {
  spec = await createBacklogTable(t.db);
  await createThingsTable(t.db, THINGS);
  // t1 agrees; t2's tuple is missing; vpc:t9 is an orphan (no row).
  await t.db
    .insertInto(THINGS)
    .values([
      { id: 't1', project_id: 'p1' },
      { id: 't2', project_id: 'p1' },
    ])
    .execute();
  await fga.client.write({ writes: [thingTuple('t1', 'p1'), thingTuple('t9', 'p1')] });
  const dir = mkdtempSync(join(tmpdir(), 'outbox-cli-audit-'));
  const owner = pathToFileURL(join(import.meta.dirname, 'testing/things-owner.ts')).href;
  const outbox = { table: spec.table, partitionColumn: 'resource_id', maxAttempts: 3 };
  config = join(dir, 'outbox.config.ts');
  writeFileSync(
    config,
    `import { thingsOwner } from ${JSON.stringify(owner)};
     export default {
       databaseUrl: '$TEST_DATABASE_URL',
       openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID', apiToken: '\${OPENFGA_API_TOKEN:-}' },
       outboxes: { things: { ...${JSON.stringify(outbox)}, owner: thingsOwner(${JSON.stringify(THINGS)}) } },
     };`,
  );
  noOwner = join(dir, 'no-owner.json');
  writeFileSync(
    noOwner,
    JSON.stringify({
      databaseUrl: '$TEST_DATABASE_URL',
      openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID' },
      outboxes: { things: outbox },
    }),
  );
});

const env = () => ({ TEST_DATABASE_URL: t.url, ...openFgaEnv(fga) });
const run = (...args: string[]) => runCli([...args, '--config', config], { env: env() });

describe('audit and repair', () => {
  test('audit reports the missing tuple and the orphan exactly, exit 1; --json fits its schema', async () => {
    const audit = await run('audit', '--json');
    expect(audit.code, audit.stderr).toBe(1);
    const doc = jsonOf(audit);
    assertOutputSchema('audit', doc);
    expect(doc).toMatchObject({
      drifted: 2,
      outboxes: [
        {
          name: 'things',
          table: spec.table,
          mode: 'full',
          drifted: 2,
          missing: { partitions: 1, tuples: 1, sample: [{ partitionKey: 'vpc:t2', tuples: [thingTuple('t2', 'p1')] }] },
          unexpected: { partitions: 0, tuples: 0 },
          orphans: { objects: 1, tuples: 1, sample: [{ object: 'vpc:t9', tuples: [thingTuple('t9', 'p1')] }] },
        },
      ],
    });
    const text = await run('audit');
    expect(text.stdout).toContain('things: DRIFT in 2 partition(s)');
    expect(text.stdout).toContain('  missing     project:p1 project vpc:t2\n');
    expect(text.stdout).toContain('  orphan      project:p1 project vpc:t9\n');
  });

  test('repair is a dry run by default (exit 1 while corrections are planned); --apply enqueues; drain delivers; the audit is then clean', async () => {
    const plan = await run('repair', '--json');
    expect(plan.code, plan.stderr).toBe(1);
    const planned = jsonOf(plan);
    assertOutputSchema('repair', planned);
    expect(planned).toMatchObject({
      dryRun: true,
      outboxes: [{ partitions: 2, intents: 2, writes: 1, deletes: 1, withinBudget: true, enqueued: [] }],
    });

    const refused = await run('repair', '--apply', '--max-deletes', '0');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('would delete 1 tuples, more than --max-deletes 0; nothing was enqueued');

    const applied = await run('repair', '--apply', '--json');
    expect(applied.code, applied.stderr).toBe(0);
    expect(jsonOf(applied)).toMatchObject({
      dryRun: false,
      outboxes: [{ intents: 2, enqueued: [expect.any(String), expect.any(String)] }],
    });
    expect((await run('drain')).code).toBe(0);

    const clean = await run('audit');
    expect(clean.code, clean.stdout + clean.stderr).toBe(0);
    expect(clean.stdout).toMatch(
      /^things: OpenFGA agrees with the owner \(full; compared \d+ partition\(s\), 0 skipped as pending, \d+ OpenFGA read\(s\)\)\n$/,
    );
  });

  test('without an owner in the config, audit and repair refuse (exit 2) saying so', async () => {
    for (const command of ['audit', 'repair']) {
      const result = await runCli([command, '--config', noOwner], { env: env() });
      expect(result.code).toBe(2);
      expect(result.stderr).toBe(
        `outbox: ${command} of things needs an owner mapping, and ${noOwner} gives none (set outboxes.things.owner to an OutboxOwner, in a .ts or .mjs config)\n`,
      );
    }
  });

  test('an unreachable OpenFGA is exit 3', async () => {
    const result = await runCli(['audit', '--config', config], {
      env: { ...env(), OPENFGA_API_URL: `http://127.0.0.1:${await freePort()}` },
    });
    expect(result.code).toBe(3);
    expect(result.stderr.trimEnd().split('\n')).toHaveLength(1);
  });

  test('--incremental without its cursor table is configuration (exit 2), naming the DDL to run', async () => {
    // The project's migrations create it (0010): a database of a user who has not is one without it.
    await sql`drop table if exists public.outbox_audit_cursor`.execute(t.db);
    const result = await run('audit', '--incremental');
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('auditCursorTableDdl');
  });
});
