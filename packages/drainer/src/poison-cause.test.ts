import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { enqueueRows, freshOutbox, outboxTable, quiet } from './testing/fixture.js';
import { createDrainer, createRecordingSink, type Outcome } from './index.js';

// A poisoned row says why (docs/ledger.md): the reconciler revives the two causes differently.
const t = useTestDatabase();

test("a refusal records cause refused and the sink's code; running out of transient attempts records exhausted; a retried row has no cause", async () => {
  const spec = await freshOutbox(t.db, { maxAttempts: 2 });
  const [refused, odd, exhausted, retried] = await enqueueRows(t.db, spec, [
    'vpc:refused',
    'vpc:odd',
    'vpc:exhausted',
    'vpc:retried',
  ]);
  const outcomes: Record<string, Outcome> = {
    'vpc:refused': {
      kind: 'permanent',
      error: 'OpenFGA 400 validation_error: type vpc not found',
      code: 'validation_error',
    },
    // A code that is not a short identifier is a message, not a label: not stored.
    'vpc:odd': { kind: 'permanent', error: 'refused', code: 'two words' },
    'vpc:exhausted': { kind: 'transient', error: 'ECONNREFUSED' },
  };
  let calls = 0;
  const sink = createRecordingSink({
    outcome: (intent) =>
      intent.partitionKey === 'vpc:retried'
        ? calls++ === 0
          ? { kind: 'transient', error: 'blip' }
          : undefined
        : outcomes[intent.partitionKey],
  });
  const drainer = createDrainer({ db: t.db, spec, sink, backoff: { baseMs: 0, maxMs: 0 }, logger: quiet });
  await drainer.drainOnce();
  await drainer.drainOnce();
  const rows = await sql<{
    id: string;
    attempt_count: number;
    poison_cause: string | null;
    poison_code: string | null;
    sent: boolean;
  }>`
    select id::text as id, attempt_count, poison_cause, poison_code, sent_at is not null as sent from ${outboxTable(spec)} order by id`.execute(
    t.db,
  );
  expect(rows.rows).toEqual([
    { id: refused, attempt_count: 2, poison_cause: 'refused', poison_code: 'validation_error', sent: false },
    { id: odd, attempt_count: 2, poison_cause: 'refused', poison_code: null, sent: false },
    { id: exhausted, attempt_count: 2, poison_cause: 'exhausted', poison_code: null, sent: false },
    { id: retried, attempt_count: 1, poison_cause: null, poison_code: null, sent: true },
  ]);
});
