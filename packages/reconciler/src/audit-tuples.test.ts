import { expect, test } from 'vitest';
import { addToDigest, tupleDigest } from './audit-tuples.js';

const a = { user: 'user:a', relation: 'owner', object: 'vpc:1' };
const b = { user: 'project:p', relation: 'project', object: 'vpc:1' };

test("a partition's digest is its set of tuples: any order, duplicates collapsed, built up one by one alike", () => {
  expect(tupleDigest([a, b])).toBe(tupleDigest([b, a, a]));
  expect(addToDigest(addToDigest(0n, b), a)).toBe(tupleDigest([a, b]));
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
