import { useTestDatabase } from '@outbox/test-stack';
import { beforeAll, describe, expect, test } from 'vitest';
import type { OutboxSpec } from '@outbox/outbox';
import { checkLine } from './status-command.js';
import {
  createBacklogTable,
  deliver,
  deregister,
  enqueueIntent,
  poison,
  refuse,
  register,
  REFUSED_ERROR,
  scriptedBacklog,
  type Backlog,
} from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';

// status, list and show on one scripted backlog (a row in every state, both poison causes), through the bin.
const t = useTestDatabase();
let backlog: Backlog;
const target = (spec = backlog.spec) => [
  '--database-url',
  t.url,
  '--table',
  spec.table,
  '--partition-column',
  'resource_id',
  '--max-attempts',
  '3',
];

beforeAll(async () => {
  backlog = await scriptedBacklog(t.db);
});

/** A register of `key` poisoned by `fail`, then superseded by its delivered deregister. */
async function superseded(
  spec: OutboxSpec,
  key: string,
  fail: (db: typeof t.db, spec: OutboxSpec, id: string, error: string) => Promise<void>,
): Promise<void> {
  await fail(t.db, spec, await enqueueIntent(t.db, spec, key, register(key.slice(4))), REFUSED_ERROR);
  await deliver(t.db, spec, await enqueueIntent(t.db, spec, key, deregister(key.slice(4))));
}

describe('status', () => {
  test('--json counts every state exactly, and fits its schema', async () => {
    const run = await runCli(['status', '--json', ...target()]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('status', doc);
    const [outbox] = (doc as { outboxes: Record<string, unknown>[] }).outboxes;
    expect(outbox).toMatchObject({
      name: backlog.spec.table,
      table: backlog.spec.table,
      pending: 5, // b (superseded), c (poisoned), d (backing off), e (deliverable), g (refused)
      deliverable: 2,
      backingOff: 1,
      poisoned: 3,
      poisonedByCause: { exhausted: 2, refused: 1 }, // b and c ran out of attempts; OpenFGA refused g
      superseded: 1,
      retired: 1,
      discarded: 1,
    });
    const { password } = new URL(t.url);
    expect(outbox?.database).toBe(t.url.replace(`:${password}@`, ':***@'));
    expect(outbox?.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(0);
    expect(Date.now() - Date.parse(outbox?.lastDeliveryAt as string)).toBeLessThan(60_000);
    expect(run.stderr).toBe('');
  });

  test('the table shows the same counts, the refused and discarded parts named', async () => {
    const run = await runCli(['status', ...target()]);
    expect(run.code, run.stderr).toBe(0);
    const [header, row] = run.stdout.trimEnd().split('\n');
    expect(header?.split(/\s+/)).toEqual([
      'outbox',
      'pending',
      'deliverable',
      'backing-off',
      'poisoned',
      'superseded',
      'closed',
      'oldest',
      'last-delivery',
    ]);
    // poisoned names its refused part, closed (retired + discarded) its discarded part.
    expect(row).toMatch(
      new RegExp(`^${backlog.spec.table} +5 +2 +1 +3 \\(1 refused\\) +1 +2 \\(1 discarded\\) +\\d+s +\\d+s ago$`),
    );
    expect(header?.length).toBe(row?.length);
  });

  test('--check exits 1 while a row is poisoned, naming the outbox on stderr', async () => {
    const run = await runCli(['status', '--check', ...target()]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `outbox: poisoned rows: ${backlog.spec.table} 3 (1 refused, 1 superseded) (see \`outbox list --state poisoned\`, then \`outbox redrive\`, with --refused once the cause of the refusals is fixed; retire the superseded ones, never redrive them: \`outbox list --state superseded\`, then \`outbox retire IDS --reason TEXT\`)\n`,
    );
  });

  test('--check with only superseded rows left names retire, not redrive', async () => {
    const spec = await createBacklogTable(t.db);
    await superseded(spec, 'vpc:b', poison);
    const run = await runCli(['status', '--check', ...target(spec)]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `outbox: poisoned rows: ${spec.table} 1 (1 superseded) (all superseded: a delivered later intent covers each, so retire them, never redrive: see \`outbox list --state superseded\`, then \`outbox retire IDS --reason TEXT\`)\n`,
    );
  });

  test('--check leaves out --refused when the refused rows are all superseded', async () => {
    const spec = await createBacklogTable(t.db);
    await superseded(spec, 'vpc:g', (db, s, id, error) => refuse(db, s, id, error, 'validation_error'));
    await poison(t.db, spec, await enqueueIntent(t.db, spec, 'vpc:c', register('c')), 'OpenFGA unreachable');
    const run = await runCli(['status', '--check', ...target(spec)]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `outbox: poisoned rows: ${spec.table} 2 (1 refused, 1 superseded) (see \`outbox list --state poisoned\`, then \`outbox redrive\`; retire the superseded ones, never redrive them: \`outbox list --state superseded\`, then \`outbox retire IDS --reason TEXT\`)\n`,
    );
  });

  test.each([
    // [poisoned, refused, superseded, refused and revivable] of one outbox → the hint
    [[2, 0, 0, 0], 'see `outbox list --state poisoned`, then `outbox redrive`'],
    [
      [2, 1, 0, 1],
      'see `outbox list --state poisoned`, then `outbox redrive`, with --refused once the cause of the refusals is fixed',
    ],
    [
      [1, 0, 1, 0],
      'all superseded: a delivered later intent covers each, so retire them, never redrive: see `outbox list --state superseded`, then `outbox retire --outbox a IDS --reason TEXT`',
    ],
    [
      [1, 1, 1, 0],
      'all superseded: a delivered later intent covers each, so retire them, never redrive: see `outbox list --state superseded`, then `outbox retire --outbox a IDS --reason TEXT`',
    ],
    [
      [3, 1, 1, 1],
      'see `outbox list --state poisoned`, then `outbox redrive`, with --refused once the cause of the refusals is fixed; retire the superseded ones, never redrive them: `outbox list --state superseded`, then `outbox retire --outbox a IDS --reason TEXT`',
    ],
  ])('--check with %j names the actions: %s', (counts, hint) => {
    const [poisoned, refused, superseded, refusedRevivable] = counts as [number, number, number, number];
    const one = { name: 'a', poisoned, superseded, refusedRevivable };
    const line = checkLine('outbox', [{ ...one, poisonedByCause: { exhausted: poisoned - refused, refused } }], true);
    expect(line.match(/ \(((?:see|all superseded).*)\)$/)?.[1]).toBe(hint);
  });

  test('--check over several outboxes: redrive for one, retire for each of the others', () => {
    const counts = (name: string, poisoned: number, superseded: number) => ({
      name,
      poisoned,
      superseded,
      refusedRevivable: 0,
      poisonedByCause: { exhausted: poisoned, refused: 0 },
    });
    expect(checkLine('outbox', [counts('vpc', 1, 0), counts('storage', 1, 1), counts('nlb', 2, 2)], true)).toBe(
      'outbox: poisoned rows: vpc 1, storage 1 (1 superseded), nlb 2 (2 superseded) (see `outbox list --state poisoned`, then `outbox redrive`; retire the superseded ones, never redrive them: `outbox list --state superseded`, then `outbox retire --outbox NAME IDS --reason TEXT` for each of storage, nlb)',
    );
  });

  test('--watch redraws until SIGINT, then exits 0', async () => {
    const { spawn } = await import('node:child_process');
    const { CLI_NODE_ARGS, OUTBOX_BIN } = await import('./testing/run-outbox.js');
    const child = spawn(process.execPath, [...CLI_NODE_ARGS, OUTBOX_BIN, 'status', '--watch', '1', ...target()], {
      env: { PATH: process.env.PATH ?? '' },
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    const deadline = Date.now() + 30_000;
    while ((out.match(/every 1s/g) ?? []).length < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGINT');
    expect(await exited).toBe(0);
    expect((out.match(/^outbox\s+pending/gm) ?? []).length).toBeGreaterThanOrEqual(2);
  });

  test('--watch with --json is refused as usage', async () => {
    const run = await runCli(['status', '--watch', '--json', ...target()]);
    expect(run.code).toBe(2);
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
  });
});

describe('list', () => {
  test('--json lists each state as documented, last_error whole', async () => {
    const run = await runCli(['list', '--json', ...target()]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('list', doc);
    const { rows, more } = (
      doc as {
        outboxes: {
          rows: { id: string; state: string; attempts: number; lastError: string | null; partitionKey: string }[];
          more: boolean;
        }[];
      }
    ).outboxes[0]!;
    expect(more).toBe(false);
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(byId.get(backlog.delivered)).toMatchObject({
      state: 'delivered',
      partitionKey: 'vpc:a',
      attempts: 0,
      lastError: null,
    });
    expect(byId.get(backlog.superseded)).toMatchObject({ state: 'superseded', partitionKey: 'vpc:b', attempts: 3 });
    expect(byId.get(backlog.supersededBy)).toMatchObject({ state: 'delivered', partitionKey: 'vpc:b' });
    expect(byId.get(backlog.poisoned)).toMatchObject({
      state: 'poisoned',
      attempts: 3,
      lastError: expect.stringMatching(/x{120} end$/),
    });
    expect(byId.get(backlog.backingOff)).toMatchObject({
      state: 'backing-off',
      attempts: 1,
      lastError: 'OpenFGA 503: busy',
    });
    expect(byId.get(backlog.deliverable)).toMatchObject({ state: 'deliverable', attempts: 0 });
    expect(byId.get(backlog.retired)).toMatchObject({ state: 'retired' });
    expect(byId.get(backlog.poisoned)).toMatchObject({ poisonCause: 'exhausted', poisonCode: null });
    expect(byId.get(backlog.refused)).toMatchObject({
      state: 'poisoned',
      poisonCause: 'refused',
      poisonCode: 'validation_error',
      lastError: REFUSED_ERROR,
    });
    expect(byId.get(backlog.discarded)).toMatchObject({ state: 'discarded', partitionKey: 'vpc:h' });
    expect(rows.map((r) => BigInt(r.id))).toEqual([...rows.map((r) => BigInt(r.id))].sort((a, b) => (a < b ? -1 : 1)));
  });

  test('--state filters as docs/design.md §2 says: poisoned includes superseded and refused, deliverable includes backing-off', async () => {
    const ids = async (state: string) => {
      const run = await runCli(['list', '--json', '--state', state, ...target()]);
      expect(run.code, run.stderr).toBe(0);
      return (jsonOf(run) as { outboxes: { rows: { id: string }[] }[] }).outboxes[0]!.rows.map((r) => r.id);
    };
    expect(await ids('poisoned')).toEqual([backlog.superseded, backlog.poisoned, backlog.refused]);
    expect(await ids('superseded')).toEqual([backlog.superseded]);
    expect(await ids('deliverable')).toEqual([backlog.backingOff, backlog.deliverable]);
    expect(await ids('backing-off')).toEqual([backlog.backingOff]);
    expect(await ids('pending')).toEqual([
      backlog.superseded,
      backlog.poisoned,
      backlog.backingOff,
      backlog.deliverable,
      backlog.refused,
    ]);
    expect(await ids('retired')).toEqual([backlog.retired]);
    expect(await ids('discarded')).toEqual([backlog.discarded]);
  });

  test('--key, --from-id/--to-id and --limit narrow the rows; the table cuts last_error', async () => {
    const byKey = await runCli(['list', '--key', 'vpc:b', ...target()]);
    expect(byKey.code, byKey.stderr).toBe(0);
    const lines = byKey.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(
      new RegExp(`^\\S+\\s+${backlog.superseded}\\s+vpc:b\\s+superseded\\s+3\\s+-\\s+OpenFGA unreachable`),
    );
    expect(lines[2]).toMatch(new RegExp(`\\s${backlog.supersededBy}\\s+vpc:b\\s+delivered\\s`));

    const range = await runCli([
      'list',
      '--json',
      '--from-id',
      backlog.poisoned,
      '--to-id',
      backlog.backingOff,
      ...target(),
    ]);
    expect((jsonOf(range) as { outboxes: { rows: { id: string }[] }[] }).outboxes[0]!.rows.map((r) => r.id)).toEqual([
      backlog.poisoned,
      backlog.backingOff,
    ]);

    const limited = await runCli(['list', '--limit', '2', ...target()]);
    expect(limited.stdout).toContain('more rows match than --limit 2');
    const poisonedLine = (await runCli(['list', '--state', 'poisoned', ...target()])).stdout
      .split('\n')
      .find((l) => l.includes('vpc:c'));
    expect(poisonedLine).toMatch(/…$/);
    expect(poisonedLine).not.toContain(' end');
  });

  test('a bad --state or id is usage (exit 2), one line', async () => {
    for (const args of [
      ['--state', 'stuck'],
      ['--from-id', 'x1'],
      ['--limit', '0'],
    ]) {
      const run = await runCli(['list', ...args, ...target()]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr.trimEnd().split('\n'), run.stderr).toHaveLength(1);
      expect(run.stdout).toBe('');
    }
  });
});

describe('show', () => {
  test('a superseded row: its state, payload and the id that supersedes it', async () => {
    const run = await runCli(['show', backlog.superseded, '--json', ...target()]);
    expect(run.code, run.stderr).toBe(0);
    const doc = jsonOf(run);
    assertOutputSchema('show', doc);
    expect(doc).toMatchObject({
      id: backlog.superseded,
      partitionKey: 'vpc:b',
      state: 'superseded',
      supersededBy: backlog.supersededBy,
      attempts: 3,
      maxAttempts: 3,
      isHead: false,
      payload: {
        writes: [
          { user: 'project:p1', relation: 'project', object: 'vpc:b' },
          { user: 'user:alice', relation: 'owner', object: 'vpc:b' },
        ],
      },
    });
    const text = await runCli(['show', backlog.superseded, ...target()]);
    expect(text.stdout).toContain(`superseded by #${backlog.supersededBy} (delivered)`);
    expect(text.stdout).toContain('      "relation": "owner"\n');
  });

  test('a poisoned row without successor is not superseded; a retired row shows its reason', async () => {
    expect(jsonOf(await runCli(['show', backlog.poisoned, '--json', ...target()]))).toMatchObject({
      state: 'poisoned',
      supersededBy: null,
    });
    expect(jsonOf(await runCli(['show', backlog.retired, '--json', ...target()]))).toMatchObject({
      state: 'retired',
      retiredReason: 'deregistered during the outage',
    });
  });

  test('a refused row says why it is poisoned; a discarded row that its tuples were never written', async () => {
    const refused = await runCli(['show', backlog.refused, ...target()]);
    expect(refused.stdout).toMatch(/^state +poisoned \(refused: validation_error\)$/m);
    const discarded = await runCli(['show', backlog.discarded, ...target()]);
    expect(discarded.stdout).toMatch(/^state +discarded: its tuples were never written$/m);
    expect(discarded.stdout).toMatch(/^closed +\S+Z: project deleted; the grant is not wanted$/m);
    expect(jsonOf(await runCli(['show', backlog.discarded, '--json', ...target()]))).toMatchObject({
      state: 'discarded',
      retiredReason: 'project deleted; the grant is not wanted',
    });
  });

  test('an id with no row is exit 1, one line', async () => {
    const run = await runCli(['show', '999999', ...target()]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `outbox: ${backlog.spec.table} has no row 999999 (see \`outbox list --outbox ${backlog.spec.table}\`)\n`,
    );
  });
});
