import { execFileSync } from 'node:child_process';
import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { scriptedBacklog } from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, OUTBOX_BIN, runCli, TSX_LOADER } from './testing/run-outbox.js';

// redrive and retire through the bin, on the scripted backlog: what is revived, what is only
// reported, what retire accepts, refuses and asks.
const t = useTestDatabase();
// No --max-attempts: the table records 3, and the CLI counts with it as the drainers do.
const flags = (table: string) => ['--database-url', t.url, '--table', table, '--partition-column', 'resource_id'];

describe('redrive', () => {
  test('revives the poisoned row, reports the superseded one, never revives it; --json says so', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', '--json', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('redrive', doc);
    expect(doc).toEqual({
      dryRun: false,
      outboxes: [
        {
          name: b.spec.table,
          table: b.spec.table,
          revived: [{ id: b.poisoned, partitionKey: 'vpc:c', lastError: expect.stringMatching(/^OpenFGA unreachable/) }],
          superseded: [{ id: b.superseded, partitionKey: 'vpc:b', lastError: 'OpenFGA unreachable: connect ECONNREFUSED' }],
          deferred: [],
          skipped: false,
          more: false,
          moreSuperseded: false,
        },
      ],
    });
    const status = jsonOf(await runCli(['status', '--json', ...flags(b.spec.table)])) as { outboxes: Record<string, number>[] };
    expect(status.outboxes[0]).toMatchObject({ poisoned: 1, superseded: 1, deliverable: 3 });
  });

  test('the human report names the rows and the retire command to run', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      [
        `${b.spec.table}: revived 1, superseded 1, deferred 0`,
        '  revived:',
        `    #${b.poisoned} vpc:c`,
        '  superseded (a later intent of the partition was delivered; never revived):',
        `    #${b.superseded} vpc:b: OpenFGA unreachable: connect ECONNREFUSED`,
        `  retire them: outbox retire --outbox ${b.spec.table} ${b.superseded} --reason "…"`,
        '',
      ].join('\n'),
    );
  });

  test('--dry-run says what a pass would revive and leave superseded, and changes nothing', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', '--dry-run', '--json', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    const outbox = (jsonOf(run) as { outboxes: Array<{ revived: Array<{ id: string }>; superseded: Array<{ id: string }> }> }).outboxes[0];
    expect(outbox?.revived.map((i) => i.id)).toEqual([b.poisoned]);
    expect(outbox?.superseded.map((i) => i.id)).toEqual([b.superseded]);
    const rows = await sql<{ attempt_count: number }>`select attempt_count from ${sql.raw(tableNames(b.spec).table)} where id = ${b.poisoned}`.execute(t.db);
    expect(rows.rows[0]?.attempt_count).toBe(3);
  });
});

describe('retire', () => {
  test('without a terminal and without --yes it refuses (exit 2) and changes nothing', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['retire', b.superseded, '--reason', 'deregistered', ...flags(b.spec.table)]);
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('outbox: retire changes rows and asks first, but there is no terminal to ask on (pass --yes)\n');
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({ state: 'superseded' });
  });

  test('--yes retires a superseded row with its reason; --json lists it', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['retire', b.superseded, '--reason', 'deregistered during the outage', '--yes', '--json', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('retire', doc);
    expect(doc).toEqual({
      outbox: b.spec.table,
      table: b.spec.table,
      reason: 'deregistered during the outage',
      retired: [{ id: b.superseded, partitionKey: 'vpc:b', lastError: 'OpenFGA unreachable: connect ECONNREFUSED' }],
      refused: [],
    });
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({ state: 'retired', retiredReason: 'deregistered during the outage' });
  });

  test('a row that is not superseded refuses the whole call (exit 1), naming each id and why', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['retire', b.superseded, b.poisoned, b.delivered, '--reason', 'x', '--yes', '--json', ...flags(b.spec.table)]);
    expect(run.code).toBe(1);
    expect(jsonOf(run)).toMatchObject({ retired: [], refused: [{ id: b.poisoned, refusal: 'revivable' }, { id: b.delivered, refusal: 'delivered' }] });
    expect(run.stderr).toBe(
      `outbox: retire on ${b.spec.table} changed nothing: not superseded: ${b.poisoned} revivable, ${b.delivered} delivered (retire only what \`outbox redrive\` reports superseded)\n`,
    );
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({ state: 'superseded' });
  });

  test('on a terminal it shows the rows and asks; only a yes retires', async () => {
    const b = await scriptedBacklog(t.db);
    const command = (answer: string) =>
      `printf '${answer}\\n' | script -qec "${[process.execPath, '--import', TSX_LOADER, OUTBOX_BIN, 'retire', b.superseded, '--reason', 'asked', ...flags(b.spec.table)].join(' ')}" /dev/null; echo "exit=$?"`;
    const no = execFileSync('sh', ['-c', command('n')], { env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8' });
    expect(no).toContain(`#${b.superseded} vpc:b superseded`);
    expect(no).toContain(`Retire 1 intent(s) of ${b.spec.table} with reason "asked"? [y/N]`);
    expect(no).toContain('outbox: nothing retired');
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({ state: 'superseded' });
    const yes = execFileSync('sh', ['-c', command('y')], { env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8' });
    expect(yes).toContain(`retired #${b.superseded} ("asked")`);
    expect(yes).toContain('exit=0');
  });
});
