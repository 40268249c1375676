import { useTestDatabase } from '@outbox/test-stack';
import fc from 'fast-check';
import { expect, test } from 'vitest';
import { compactOutbox } from './index.js';
import { ledgerWorld, type Shape } from './testing/ledger-world.js';

// Compaction never changes a decision: on random histories of both outbox shapes, the redrive's
// answers (dry runs), the stats and the audit's findings are the same before and after it.
// CI runs LEDGER_PROPERTY_RUNS=30 histories by default; the long setting is documented in docs/ledger.md.
const t = useTestDatabase();
const RUNS = Number(process.env.LEDGER_PROPERTY_RUNS ?? 30);
const DAY = 86_400_000;

const key = fc.integer({ min: 0, max: 1 });
const step = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('write' as const), key, variant: fc.integer({ min: 0, max: 7 }) }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('deliver' as const), key }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('poison' as const), key, refused: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('redrive' as const), refused: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('close' as const) }) },
);
const history = fc.record({
  shape: fc.constantFrom<Shape>('register', 'tuple'),
  steps: fc.array(step, { minLength: 1, maxLength: 40, size: 'max' }),
  aged: fc.integer({ min: 0, max: 100 }).map((percent) => percent / 100), // the oldest share of the rows, aged past the retention
  closedRetentionMs: fc.constantFrom(0, 30 * DAY),
});

test('compaction changes no redrive decision, no stats count and no audit finding', async () => {
  let compacted = 0;
  await fc.assert(
    fc.asyncProperty(history, async ({ shape, steps, aged, closedRetentionMs }) => {
      const world = await ledgerWorld(t.db, shape);
      try {
        for (const s of steps) {
          if (s.kind === 'write') await world.write(s.key, s.variant);
          else if (s.kind === 'deliver') await world.deliverHead(s.key);
          else if (s.kind === 'poison') await world.poisonHead(s.key, s.refused);
          else if (s.kind === 'redrive') await world.redrive(s.refused);
          else await world.close();
        }
        await world.age(aged, 40);
        const before = await world.decisions();
        const rows = await world.rows();
        const result = await compactOutbox({
          db: t.db,
          spec: world.spec,
          retentionMs: 30 * DAY,
          closedRetentionMs,
          batchSize: 4,
        });
        compacted += result.deleted;
        expect(await world.rows()).toBe(rows - result.deleted);
        expect(await world.decisions()).toEqual(before);
      } finally {
        await world.dispose();
      }
    }),
    {
      numRuns: RUNS,
      // Run first, every time: a grant of {owner} poisoned, then {owner} delivered (covers it: superseded), then
      // {editor} delivered (does not) — the covering row is not the last word, and only the pending row keeps it.
      examples: [
        [
          {
            shape: 'tuple',
            steps: [
              { kind: 'write', key: 0, variant: 1 },
              { kind: 'write', key: 0, variant: 1 },
              { kind: 'write', key: 0, variant: 2 },
              { kind: 'poison', key: 0, refused: false },
              { kind: 'deliver', key: 0 },
              { kind: 'deliver', key: 0 },
            ],
            aged: 1,
            closedRetentionMs: 0,
          },
        ],
      ],
    },
  );
  // The histories did give compaction something to delete.
  expect(compacted).toBeGreaterThan(0);
}, 300_000);
