import fc from 'fast-check';
import { expect, test } from 'vitest';
import { tupleDigest, tupleId } from './audit-tuples.js';
import { hash64, PartitionDigests } from './partition-digests.js';

const a = { user: 'user:a', relation: 'owner', object: 'vpc:1' };
const b = { user: 'project:p', relation: 'project', object: 'vpc:1' };

test("a partition's digest is its set of tuples: any order, duplicates collapsed", () => {
  expect(tupleDigest([a, b])).toBe(tupleDigest([b, a, a]));
  expect(tupleDigest([])).toBe(0n);
});

test('a tuple more, less or with another condition digests differently', () => {
  const digest = tupleDigest([a, b]);
  expect(tupleDigest([a])).not.toBe(digest);
  expect(tupleDigest([a, b, { ...a, object: 'vpc:2' }])).not.toBe(digest);
  expect(tupleDigest([{ ...a, condition: { name: 'in_region', context: { region: 'eu' } } }, b])).not.toBe(digest);
  // A condition's context compares by content, whatever its keys' order.
  expect(tupleDigest([{ ...a, condition: { name: 'c', context: { x: 1, y: 2 } } }])).toBe(
    tupleDigest([{ ...a, condition: { name: 'c', context: { y: 2, x: 1 } } }]),
  );
});

test("the scan's table holds each partition's digest as tupleDigest makes it, through its growth; taken once; the rest named by hash", () => {
  fc.assert(
    fc.property(
      // Partitions of distinct tuples (OpenFGA holds each once), interleaved as a scan reads them.
      fc.uniqueArray(fc.tuple(fc.integer({ min: 0, max: 3000 }), fc.string({ maxLength: 6 })), {
        maxLength: 4000,
        selector: ([p, u]) => `${p} ${u}`,
      }),
      fc.integer({ min: 0, max: 3000 }),
      (rows, notExpected) => {
        const byPartition = new Map<string, Array<typeof a>>();
        const table = new PartitionDigests();
        for (const [p, user] of rows) {
          const tuple = { user: `user:${user}`, relation: 'owner', object: `vpc:${p}` };
          byPartition.set(tuple.object, [...(byPartition.get(tuple.object) ?? []), tuple]);
          table.add(hash64(tuple.object), hash64(tupleId(tuple)));
        }
        expect(table.size).toBe(byPartition.size);
        const skipped = `vpc:${notExpected}`;
        for (const [key, tuples] of byPartition) {
          if (key === skipped) continue;
          expect(table.take(hash64(key))).toBe(tupleDigest(tuples));
          expect(table.take(hash64(key))).toBe(0n);
        }
        expect(table.take(hash64('vpc:absent'))).toBe(0n);
        const left = byPartition.has(skipped) ? [hash64(skipped).join(':')] : [];
        expect([...table.untaken()]).toEqual(left);
        table.release();
        expect(() => table.take(hash64(skipped))).toThrow(/after release/);
      },
    ),
    { numRuns: 30 },
  );
});
