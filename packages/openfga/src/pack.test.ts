import { describe, expect, test } from 'vitest';
import { keysDeletedLater, packRound, prepareIntents, segmentByPartition, tupleKeyId, withoutSupersededWrites, writeRequestBody, type Segment } from './pack.js';
import { intent, key } from './testing/fixtures.js';

const writes = (...keys: string[]) => ({ writes: keys.map(key) });
const deletes = (...keys: string[]) => ({ deletes: keys.map(key) });
const indexes = (segments: readonly Segment[] | undefined) => (segments ?? []).map((s) => s.items.map((i) => i.index));

describe('segmentByPartition', () => {
  test("a partition's consecutive intents on disjoint keys share a segment; a repeated key starts a new one", () => {
    const prepared = prepareIntents([
      intent('vpc:a', writes('user:1 owner vpc:a')),
      intent('vpc:b', writes('user:1 owner vpc:b')),
      intent('vpc:a', writes('user:2 viewer vpc:a')),
      intent('vpc:a', deletes('user:1 owner vpc:a')), // same key as intent 0: not in the same request
      intent('vpc:a', writes('user:3 viewer vpc:a')),
    ]);
    const segments = segmentByPartition(prepared, 100);
    expect([...segments.keys()]).toEqual(['vpc:a', 'vpc:b']);
    expect(indexes(segments.get('vpc:a'))).toEqual([[0, 2], [3, 4]]);
    expect(indexes(segments.get('vpc:b'))).toEqual([[1]]);
  });

  test('a segment grows only while its operations fit; an intent larger than the limit stands alone', () => {
    const many = (n: number, tag: string) => writes(...Array.from({ length: n }, (_, i) => `user:${tag}${i} viewer vpc:a`));
    const prepared = prepareIntents([intent('vpc:a', many(6, 'x')), intent('vpc:a', many(5, 'y')), intent('vpc:a', many(12, 'z')), intent('vpc:a', many(1, 'w'))]);
    expect(indexes(segmentByPartition(prepared, 10).get('vpc:a'))).toEqual([[0], [1], [2], [3]]);
    expect(indexes(segmentByPartition(prepared, 11).get('vpc:a'))).toEqual([[0, 1], [2], [3]]);
    expect(indexes(segmentByPartition(prepared, 100).get('vpc:a'))).toEqual([[0, 1, 2, 3]]);
  });

  test('an invalid payload is refused before sending, as a segment of its own', () => {
    const prepared = prepareIntents([
      intent('vpc:a', writes('user:1 owner vpc:a')),
      intent('vpc:a', { writes: [{ user: 'user:1', relation: 'owner' }] } as never),
      intent('vpc:a', writes('user:2 owner vpc:a')),
    ]);
    expect(prepared[1]?.invalid).toMatch(/invalid intent payload, not sent: payload\.writes\[0\]\.object/);
    expect(indexes(segmentByPartition(prepared, 100).get('vpc:a'))).toEqual([[0], [1], [2]]);
  });
});

describe('packRound', () => {
  const heads = (prepared: ReturnType<typeof prepareIntents>, max = 100) =>
    [...segmentByPartition(prepared, max).values()].map((queue) => queue[0] as Segment);

  test('packs segments first-fit-decreasing into requests of at most the limit, in batch order inside', () => {
    const sized = (p: string, n: number) => intent(p, writes(...Array.from({ length: n }, (_, i) => `user:${i} viewer ${p}`)));
    const prepared = prepareIntents([sized('vpc:a', 60), sized('vpc:b', 30), sized('vpc:c', 50), sized('vpc:d', 40), sized('vpc:e', 20)]);
    const round = packRound(heads(prepared), 100);
    const sizes = round.requests.map((r) => r.reduce((n, item) => n + item.writes.length, 0));
    expect(sizes).toEqual([100, 100]); // 60+40, 50+30+20
    expect(round.requests.map((r) => r.map((i) => i.index))).toEqual([[0, 3], [1, 2, 4]]);
  });

  test('two partitions touching one tuple key are never in one round: the later waits', () => {
    const prepared = prepareIntents([
      intent('vpc:a', writes('user:s viewer project:p', 'user:1 owner vpc:a')),
      intent('vpc:b', writes('user:s viewer project:p')),
      intent('vpc:c', writes('user:1 owner vpc:c')),
    ]);
    const round = packRound(heads(prepared), 100);
    expect(round.taken.map((s) => s.partitionKey)).toEqual(['vpc:a', 'vpc:c']);
    expect(round.requests.map((r) => r.map((i) => i.index))).toEqual([[0, 2]]);
  });
});

test('writeRequestBody: writes keep their condition, deletes drop it', () => {
  const condition = { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } };
  const [item] = prepareIntents([
    intent('project:p', { writes: [{ ...key('user:1 viewer project:p'), condition }], deletes: [{ ...key('user:2 viewer project:p'), condition }] }),
  ]);
  expect(writeRequestBody([item!])).toEqual({
    writes: [{ user: 'user:1', relation: 'viewer', object: 'project:p', condition }],
    deletes: [{ user: 'user:2', relation: 'viewer', object: 'project:p' }],
  });
});

test('writeRequestBody: a condition without a context is sent with context {} (a replay on the postgres datastore is then a duplicate, not a 409)', () => {
  const [item] = prepareIntents([intent('project:p', { writes: [{ ...key('user:1 viewer project:p'), condition: { name: 'non_expired_grant' } }] })]);
  expect(writeRequestBody([item!])).toEqual({
    writes: [{ user: 'user:1', relation: 'viewer', object: 'project:p', condition: { name: 'non_expired_grant', context: {} } }],
  });
});

test('keysDeletedLater: per intent, the keys a later intent of its own partition deletes', () => {
  const prepared = prepareIntents([
    intent('vpc:a', writes('user:1 owner vpc:a', 'user:2 owner vpc:a')),
    intent('vpc:b', deletes('user:2 owner vpc:a')), // another partition: does not count
    intent('vpc:a', deletes('user:1 owner vpc:a')),
    intent('vpc:a', writes('user:1 owner vpc:a')),
  ]);
  const later = keysDeletedLater(prepared);
  expect([...later.keys()]).toEqual([0]);
  expect([...(later.get(0) ?? [])]).toEqual([tupleKeyId(key('user:1 owner vpc:a'))]);
  const reduced = withoutSupersededWrites(prepared[0]!, later.get(0)!);
  expect(reduced?.writes).toEqual([key('user:2 owner vpc:a')]);
  expect(withoutSupersededWrites(prepared[3]!, later.get(0)!)?.writes).toEqual([]);
  expect(withoutSupersededWrites(prepared[1]!, later.get(0)!)).toBeUndefined();
});
