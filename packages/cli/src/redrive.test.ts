import { tableNames } from '@outbox/outbox/protocol';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { REFUSED_ERROR, scriptedBacklog } from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli, runOnTerminal } from './testing/run-outbox.js';

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
      refused: false,
      outboxes: [
        {
          name: b.spec.table,
          table: b.spec.table,
          revived: [
            {
              id: b.poisoned,
              partitionKey: 'vpc:c',
              lastError: expect.stringMatching(/^OpenFGA unreachable/),
              poisonCause: 'exhausted',
              poisonCode: null,
            },
          ],
          superseded: [
            {
              id: b.superseded,
              partitionKey: 'vpc:b',
              lastError: 'OpenFGA unreachable: connect ECONNREFUSED',
              poisonCause: 'exhausted',
              poisonCode: null,
            },
          ],
          deferred: [],
          // Refused for good: a timer pass leaves it for a model fix, and says so.
          waiting: [
            {
              id: b.refused,
              partitionKey: 'vpc:g',
              lastError: REFUSED_ERROR,
              poisonCause: 'refused',
              poisonCode: 'validation_error',
              requested: false,
              reviveAfter: null,
            },
          ],
          skipped: false,
          more: false,
          moreSuperseded: false,
          moreWaiting: false,
        },
      ],
    });
    const status = jsonOf(await runCli(['status', '--json', ...flags(b.spec.table)])) as {
      outboxes: Record<string, unknown>[];
    };
    expect(status.outboxes[0]).toMatchObject({
      poisoned: 2,
      poisonedByCause: { exhausted: 1, refused: 1 },
      superseded: 1,
      deliverable: 3,
    });
  });

  test('the human report names the rows and the retire command to run', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      [
        `${b.spec.table}: revived 1, superseded 1, deferred 0, waiting 1`,
        '  revived:',
        `    #${b.poisoned} vpc:c`,
        '  superseded (a later intent of the partition was delivered; never revived):',
        `    #${b.superseded} vpc:b: OpenFGA unreachable: connect ECONNREFUSED`,
        `  retire them: outbox retire --outbox ${b.spec.table} ${b.superseded} --reason "…"`,
        '  waiting (refused by OpenFGA; retried only when asked: fix the cause, then pass --refused):',
        `    #${b.refused} vpc:g: ${REFUSED_ERROR}`,
        `  or discard them: outbox discard --outbox ${b.spec.table} ${b.refused} --reason "…"`,
        '',
      ].join('\n'),
    );
  });

  test('--refused revives the refused row too; the superseded one still never', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', '--refused', '--json', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run) as {
      refused: boolean;
      outboxes: { revived: { id: string; poisonCause: string }[]; superseded: { id: string }[]; waiting: unknown[] }[];
    };
    assertOutputSchema('redrive', doc);
    expect(doc.refused).toBe(true);
    expect(doc.outboxes[0]?.revived.map((i) => [i.id, i.poisonCause])).toEqual([
      [b.poisoned, 'exhausted'],
      [b.refused, 'refused'],
    ]);
    expect(doc.outboxes[0]?.superseded.map((i) => i.id)).toEqual([b.superseded]);
    expect(doc.outboxes[0]?.waiting).toEqual([]);
    expect(jsonOf(await runCli(['show', b.refused, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'deliverable',
      attempts: 0,
    });
  });

  test('--dry-run says what a pass would revive and leave superseded, and changes nothing', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['redrive', '--dry-run', '--json', ...flags(b.spec.table)]);
    expect(run.code, run.stderr).toBe(0);
    const outbox = (
      jsonOf(run) as { outboxes: Array<{ revived: Array<{ id: string }>; superseded: Array<{ id: string }> }> }
    ).outboxes[0];
    expect(outbox?.revived.map((i) => i.id)).toEqual([b.poisoned]);
    expect(outbox?.superseded.map((i) => i.id)).toEqual([b.superseded]);
    const rows = await sql<{
      attempt_count: number;
    }>`select attempt_count from ${sql.raw(tableNames(b.spec).table)} where id = ${b.poisoned}`.execute(t.db);
    expect(rows.rows[0]?.attempt_count).toBe(3);
  });
});

describe('retire', () => {
  test('without a terminal and without --yes it refuses (exit 2) and changes nothing', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli(['retire', b.superseded, '--reason', 'deregistered', ...flags(b.spec.table)]);
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(
      'outbox: retire changes rows and asks first, but there is no terminal to ask on (pass --yes)\n',
    );
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'superseded',
    });
  });

  test('--yes retires a superseded row with its reason; --json lists it', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli([
      'retire',
      b.superseded,
      '--reason',
      'deregistered during the outage',
      '--yes',
      '--json',
      ...flags(b.spec.table),
    ]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('retire', doc);
    expect(doc).toEqual({
      outbox: b.spec.table,
      table: b.spec.table,
      reason: 'deregistered during the outage',
      retired: [
        {
          id: b.superseded,
          partitionKey: 'vpc:b',
          lastError: 'OpenFGA unreachable: connect ECONNREFUSED',
          poisonCause: 'exhausted',
          poisonCode: null,
        },
      ],
      refused: [],
    });
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'retired',
      retiredReason: 'deregistered during the outage',
    });
  });

  test('a row that is not superseded refuses the whole call (exit 1), naming each id and why', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli([
      'retire',
      b.superseded,
      b.poisoned,
      b.delivered,
      '--reason',
      'x',
      '--yes',
      '--json',
      ...flags(b.spec.table),
    ]);
    expect(run.code).toBe(1);
    expect(jsonOf(run)).toMatchObject({
      retired: [],
      refused: [
        { id: b.poisoned, refusal: 'revivable' },
        { id: b.delivered, refusal: 'delivered' },
      ],
    });
    expect(run.stderr).toBe(
      `outbox: retire on ${b.spec.table} changed nothing: not superseded: ${b.poisoned} revivable, ${b.delivered} delivered (retire only what \`outbox redrive\` reports superseded)\n`,
    );
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'superseded',
    });
  });

  test('on a terminal it shows the rows and asks; only a yes retires', async () => {
    const b = await scriptedBacklog(t.db);
    const no = runOnTerminal(['retire', b.superseded, '--reason', 'asked', ...flags(b.spec.table)], 'n');
    expect(no).toContain(`#${b.superseded} vpc:b superseded`);
    expect(no).toContain(`Retire 1 intent(s) of ${b.spec.table} with reason "asked"? [y/N]`);
    expect(no).toContain('outbox: nothing retired');
    expect(jsonOf(await runCli(['show', b.superseded, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'superseded',
    });
    const yes = runOnTerminal(['retire', b.superseded, '--reason', 'asked', ...flags(b.spec.table)], 'y');
    expect(yes).toContain(`retired #${b.superseded} ("asked")`);
    expect(yes).toContain('exit=0');
  });
});
