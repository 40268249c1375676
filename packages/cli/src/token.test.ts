import { mergeOutboxTokens, outboxToken, type OutboxSpec } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { beforeAll, describe, expect, test } from 'vitest';
import { createBacklogTable, deliver, enqueueIntent, refuse, register, REFUSED_ERROR } from './testing/backlog.js';
import { assertOutputSchema } from './testing/output-schema-check.js';
import { jsonOf, runCli } from './testing/run-outbox.js';

// `outbox token`: what became of a write, from the Outbox-Token it answered with, through the bin.
const t = useTestDatabase();
let spec: OutboxSpec;
const target = () => ['--database-url', t.url, '--table', spec.table, '--partition-column', 'resource_id'];

beforeAll(async () => {
  spec = await createBacklogTable(t.db);
});

describe('token', () => {
  test('each intent with its outcome: exit 0 when all are delivered, 1 otherwise; --json fits its schema', async () => {
    const delivered = await enqueueIntent(t.db, spec, 'vpc:d', register('d'));
    await deliver(t.db, spec, delivered);
    const refused = await enqueueIntent(t.db, spec, 'vpc:r', register('r'));
    await refuse(t.db, spec, refused, REFUSED_ERROR, 'validation_error');
    const behind = await enqueueIntent(t.db, spec, 'vpc:r', register('r2'));
    const pending = await enqueueIntent(t.db, spec, 'vpc:p', register('p'));

    const good = await runCli(['token', await outboxToken(t.db, spec, [delivered]), ...target()]);
    expect(good.code, good.stderr).toBe(0);
    expect(good.stdout).toMatch(new RegExp(`^${spec.table} #${delivered}  delivered (now|\\d+s ago)\\n$`));

    const token = mergeOutboxTokens(
      await outboxToken(t.db, spec, [delivered, refused, behind]),
      await outboxToken(t.db, spec, [pending]),
    );
    const text = await runCli(['token', token, ...target()]);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain(`#${refused}  poisoned (refused: validation_error): ${REFUSED_ERROR}`);
    expect(text.stdout).toContain(`#${behind}  waiting behind poisoned #${refused} of its partition`);
    expect(text.stdout).toContain(`#${pending}  pending: not delivered yet`);

    const json = await runCli(['token', token, '--json', ...target()]);
    expect(json.code).toBe(1);
    const document = jsonOf(json);
    assertOutputSchema('token', document);
    expect(document).toMatchObject({
      settled: false,
      delivered: false,
      intents: [
        { id: delivered, status: 'delivered', deliveredAt: expect.any(String) },
        { id: refused, status: 'poisoned', cause: 'refused', code: 'validation_error', lastError: REFUSED_ERROR },
        { id: behind, status: 'blocked', blockedBy: refused },
        { id: pending, status: 'pending' },
      ],
    });
  }, 60_000);

  test('--wait waits for a pending intent', async () => {
    const id = await enqueueIntent(t.db, spec, 'vpc:w', register('w'));
    const token = await outboxToken(t.db, spec, [id]);
    setTimeout(() => void deliver(t.db, spec, id), 1_500);
    const run = await runCli(['token', token, '--wait', '30s', ...target()]);
    expect(run.code, run.stderr).toBe(0);
  }, 60_000);

  test('a malformed token, or one of an outbox the config lacks, is exit 2; a compacted one exit 1 saying to treat it as delivered', async () => {
    const malformed = await runCli(['token', 'ot1.nope', ...target()]);
    expect([malformed.code, malformed.stderr]).toEqual([2, expect.stringMatching(/not an outbox consistency token/)]);

    const other = await createBacklogTable(t.db);
    const elsewhere = await outboxToken(t.db, other, [await enqueueIntent(t.db, other, 'vpc:o', register('o'))]);
    const unknown = await runCli(['token', elsewhere, ...target()]);
    expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringMatching(new RegExp(`names ${other.table}`))]);

    const id = await enqueueIntent(t.db, spec, 'vpc:c', register('c'));
    await deliver(t.db, spec, id);
    const token = await outboxToken(t.db, spec, [id]);
    await sql.raw(`delete from ${spec.table} where id = ${id}`).execute(t.db);
    const gone = await runCli(['token', token, ...target()]);
    expect([gone.code, gone.stderr]).toEqual([1, expect.stringMatching(/treat them as delivered/)]);
  }, 60_000);
});
