import { expect, test } from 'vitest';
import { overlappingWrites, writeTuples } from './write-recorder.js';

test("a Write body's tuples are its writes and deletes; anything else has none", () => {
  const body = JSON.stringify({
    writes: { tuple_keys: [{ user: 'user:a', relation: 'owner', object: 'vpc:1' }] },
    deletes: { tuple_keys: [{ user: 'project:p', relation: 'project', object: 'vpc:1' }] },
  });
  expect(writeTuples(body)).toEqual(['user:a owner vpc:1', 'project:p project vpc:1']);
  expect(writeTuples('not json')).toEqual([]);
});

test('a Write counts as overlapping when it starts while an earlier one of a same tuple is still in flight', () => {
  const t = (start: number, end: number, ...tuples: string[]) => ({ start, end, tuples });
  // One after the other, or in flight together on different tuples: none.
  expect(overlappingWrites([t(0, 10, 'a'), t(10, 20, 'a'), t(5, 15, 'b')])).toBe(0);
  // The second and the third each start before the first has ended (the third is listed first).
  expect(overlappingWrites([t(8, 9, 'c', 'a'), t(0, 10, 'a'), t(2, 3, 'a')])).toBe(2);
});
