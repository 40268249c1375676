import type { EnqueueInput } from '@outbox/outbox';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { stored, storedOn, tupleKey } from '@outbox/test-stack/openfga';
import { describe, expect, test } from 'vitest';
import { deletes, drainOnce, intent, kinds, noDeadline, outboxTables, sinkOn, writes } from './testing/fixtures.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

describe('delivery', () => {
  test('intents land as written (read on each exact key proves it) and deletes remove them', async () => {
    const sink = sinkOn(fga);
    const outcomes = await sink.deliver(
      [
        intent('vpc:land1', writes('project:land project vpc:land1', 'user:ann owner vpc:land1')),
        intent('vpc:land2', writes('user:bob viewer vpc:land2')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['delivered', 'delivered']);
    for (const tuple of ['project:land project vpc:land1', 'user:ann owner vpc:land1', 'user:bob viewer vpc:land2']) {
      expect(await stored(fga.client, tupleKey(tuple))).toBe(true);
    }
    expect(await stored(fga.client, tupleKey('user:bob owner vpc:land2'))).toBe(false);

    const removed = await sink.deliver([intent('vpc:land1', deletes('user:ann owner vpc:land1'))], noDeadline());
    expect(kinds(removed)).toEqual(['delivered']);
    expect(await stored(fga.client, tupleKey('user:ann owner vpc:land1'))).toBe(false);
    expect(await stored(fga.client, tupleKey('project:land project vpc:land1'))).toBe(true);
  });
});

describe('ordering within a partition', () => {
  test('intents on one key apply in id order: write, delete, write leaves the tuple; write, delete removes it', async () => {
    const sink = sinkOn(fga);
    const outcomes = await sink.deliver(
      [
        intent('vpc:ord1', writes('user:eve owner vpc:ord1')),
        intent('vpc:ord2', writes('user:eve owner vpc:ord2')),
        intent('vpc:ord1', deletes('user:eve owner vpc:ord1')),
        intent('vpc:ord2', deletes('user:eve owner vpc:ord2')),
        intent('vpc:ord1', writes('user:eve owner vpc:ord1')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['delivered', 'delivered', 'delivered', 'delivered', 'delivered']);
    expect(await stored(fga.client, tupleKey('user:eve owner vpc:ord1'))).toBe(true);
    expect(await stored(fga.client, tupleKey('user:eve owner vpc:ord2'))).toBe(false);
  });

  test('after an intent fails, the later intents of its partition are skipped and not applied; other partitions go on', async () => {
    const sink = sinkOn(fga);
    const outcomes = await sink.deliver(
      [
        intent('vpc:skip1', writes('user:fay owner nosuchtype:skip1')),
        intent('vpc:skip2', writes('user:fay owner vpc:skip2')),
        intent('vpc:skip1', writes('user:fay viewer vpc:skip1')), // disjoint: packed with its failed predecessor
        intent('vpc:skip1', writes('user:fay owner vpc:skip1')),
      ],
      noDeadline(),
    );
    expect(kinds(outcomes)).toEqual(['permanent', 'delivered', 'skipped', 'skipped']);
    expect(await stored(fga.client, tupleKey('user:fay viewer vpc:skip1'))).toBe(false);
    expect(await stored(fga.client, tupleKey('user:fay owner vpc:skip1'))).toBe(false);
    expect(await stored(fga.client, tupleKey('user:fay owner vpc:skip2'))).toBe(true);
  });
});

describe('the real drainer delivering through the OpenFGA sink', () => {
  test('rows are marked sent and their tuples are readable, in partition order', async () => {
    const spec = await outbox.fresh();
    const intents: EnqueueInput[] = [];
    for (let i = 0; i < 120; i += 1) {
      intents.push({
        partitionKey: `vpc:e2e${i}`,
        payload: writes(`project:e2e project vpc:e2e${i}`, `user:ann owner vpc:e2e${i}`),
      });
    }
    // Forty resources change hands afterwards: the second intent of the partition deletes what the first wrote.
    for (let i = 0; i < 40; i += 1) {
      intents.push({
        partitionKey: `vpc:e2e${i}`,
        payload: {
          deletes: [tupleKey(`user:ann owner vpc:e2e${i}`)],
          writes: [tupleKey(`user:bob owner vpc:e2e${i}`)],
        },
      });
    }
    await outbox.enqueue(spec, intents);
    const result = await drainOnce(t, spec, sinkOn(fga));
    expect(result).toMatchObject({ claimed: 160, delivered: 160, retried: 0, poisoned: 0, halted: false });
    expect((await outbox.rows(spec)).every((row) => row.sent)).toBe(true);
    for (let i = 0; i < 120; i += 1) {
      const owner = i < 40 ? 'user:bob' : 'user:ann';
      expect(await storedOn(fga.client, `vpc:e2e${i}`)).toEqual(
        [`${owner} owner vpc:e2e${i}`, `project:e2e project vpc:e2e${i}`].sort(),
      );
    }
  });
});
