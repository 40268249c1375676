import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { scriptedBacklog } from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli, runOnTerminal } from './testing/run-outbox.js';

// discard through the bin, on the scripted backlog: what it closes, what it refuses, when it asks.
const t = useTestDatabase();
const flags = (table: string) => ['--database-url', t.url, '--table', table, '--partition-column', 'resource_id'];
const stateOf = async (table: string, id: string) =>
  (jsonOf(await runCli(['show', id, '--json', ...flags(table)])) as { state: string }).state;

describe('discard', () => {
  test('--yes closes a poisoned row no successor covers, with its reason; --json lists it; status counts it', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli([
      'discard',
      b.poisoned,
      '--reason',
      'vpc deleted by hand',
      '--yes',
      '--json',
      ...flags(b.spec.table),
    ]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('discard', doc);
    expect(doc).toEqual({
      outbox: b.spec.table,
      table: b.spec.table,
      reason: 'vpc deleted by hand',
      discarded: [
        {
          id: b.poisoned,
          partitionKey: 'vpc:c',
          lastError: expect.stringMatching(/^OpenFGA unreachable/),
          poisonCause: 'exhausted',
          poisonCode: null,
        },
      ],
      refused: [],
    });
    expect(jsonOf(await runCli(['show', b.poisoned, '--json', ...flags(b.spec.table)]))).toMatchObject({
      state: 'discarded',
      retiredReason: 'vpc deleted by hand',
    });
    const status = jsonOf(await runCli(['status', '--json', ...flags(b.spec.table)])) as {
      outboxes: Record<string, unknown>[];
    };
    expect(status.outboxes[0]).toMatchObject({
      poisoned: 2,
      poisonedByCause: { exhausted: 1, refused: 1 },
      retired: 1,
      discarded: 2,
    });
  });

  test('the human line names the rows and what discarding means; a refused row can be discarded too', async () => {
    const b = await scriptedBacklog(t.db);
    const run = await runCli([
      'discard',
      b.refused,
      b.poisoned,
      '--reason',
      'not wanted',
      '--yes',
      ...flags(b.spec.table),
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      `${b.spec.table}: discarded #${b.poisoned}, #${b.refused} ("not wanted"): their tuples will never be written to OpenFGA\n`,
    );
    expect(run.stderr).toBe('');
  });

  test('a row that is not discardable refuses the whole call (exit 1), naming each id and why', async () => {
    const b = await scriptedBacklog(t.db);
    const ids = [b.poisoned, b.superseded, b.delivered, b.deliverable, b.discarded, '999999'];
    const run = await runCli(['discard', ...ids, '--reason', 'x', '--yes', '--json', ...flags(b.spec.table)]);
    expect(run.code).toBe(1);
    const doc = jsonOf(run);
    assertOutputSchema('discard', doc);
    expect(doc).toMatchObject({
      discarded: [],
      refused: [
        { id: b.superseded, refusal: 'superseded' },
        { id: b.delivered, refusal: 'delivered' },
        { id: b.deliverable, refusal: 'deliverable' },
        { id: b.discarded, refusal: 'discarded' },
        { id: '999999', refusal: 'unknown' },
      ],
    });
    expect(run.stderr).toBe(
      `outbox: discard on ${b.spec.table} changed nothing: not discardable: ${b.superseded} superseded, ${b.delivered} delivered, ${b.deliverable} deliverable, ${b.discarded} discarded, 999999 unknown ` +
        '(discard only poisoned rows no delivered successor covers; retire the superseded ones)\n',
    );
    expect(await stateOf(b.spec.table, b.poisoned)).toBe('poisoned');
  });

  test('without a terminal and without --yes it refuses (exit 2); bad arguments are usage, one line', async () => {
    const b = await scriptedBacklog(t.db);
    const noTerminal = await runCli(['discard', b.poisoned, '--reason', 'x', ...flags(b.spec.table)]);
    expect(noTerminal.code).toBe(2);
    expect(noTerminal.stderr).toBe(
      'outbox: discard changes rows and asks first, but there is no terminal to ask on (pass --yes)\n',
    );
    for (const args of [
      [b.poisoned, '--yes'],
      [b.poisoned, '--reason', ' ', '--yes'],
      ['--reason', 'x', '--yes'],
      ['x1', '--reason', 'x', '--yes'],
      [b.poisoned, '--reason', 'x', '--yse'],
    ]) {
      const run = await runCli(['discard', ...args, ...flags(b.spec.table)]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr.trimEnd().split('\n'), run.stderr).toHaveLength(1);
      expect(run.stdout).toBe('');
    }
    expect(await stateOf(b.spec.table, b.poisoned)).toBe('poisoned');
  });

  test('on a terminal it shows the rows, says what it means and asks; only a yes discards', async () => {
    const b = await scriptedBacklog(t.db);
    const no = runOnTerminal(['discard', b.poisoned, '--reason', 'asked', ...flags(b.spec.table)], 'n');
    expect(no).toContain(`#${b.poisoned} vpc:c poisoned`);
    expect(no).toContain(
      `Discard 1 intent(s) of ${b.spec.table} with reason "asked": their tuples will never be written to OpenFGA? [y/N]`,
    );
    expect(no).toContain('outbox: nothing discarded');
    expect(no).toContain('exit=1');
    expect(await stateOf(b.spec.table, b.poisoned)).toBe('poisoned');
    const yes = runOnTerminal(['discard', b.poisoned, '--reason', 'asked', ...flags(b.spec.table)], 'y');
    expect(yes).toContain(`discarded #${b.poisoned} ("asked")`);
    expect(yes).toContain('exit=0');
    expect(await stateOf(b.spec.table, b.poisoned)).toBe('discarded');
  });
});
