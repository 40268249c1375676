import { OpenFgaClient } from '@openfga/sdk';
import { openFgaClientConfig, useOpenFgaStore } from '@outbox/test-stack';
import { storedOn, tupleKey } from '@outbox/test-stack/openfga';
import { describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { packRound, prepareIntents, segmentByPartition, writeRequestBody, type Segment } from './pack.js';
import { bodyKeys, deletes, intent, kinds, noDeadline, recordingClient, writes } from './testing/fixtures.js';
import type { OpenFgaWriteEvent } from './write-request.js';

const fga = useOpenFgaStore();
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
    expect(indexes(segments.get('vpc:a'))).toEqual([
      [0, 2],
      [3, 4],
    ]);
    expect(indexes(segments.get('vpc:b'))).toEqual([[1]]);
  });

  test('a segment grows only while its operations fit; an intent larger than the limit stands alone', () => {
    const many = (n: number, tag: string) =>
      writes(...Array.from({ length: n }, (_, i) => `user:${tag}${i} viewer vpc:a`));
    const prepared = prepareIntents([
      intent('vpc:a', many(6, 'x')),
      intent('vpc:a', many(5, 'y')),
      intent('vpc:a', many(12, 'z')),
      intent('vpc:a', many(1, 'w')),
    ]);
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
    const sized = (p: string, n: number) =>
      intent(p, writes(...Array.from({ length: n }, (_, i) => `user:${i} viewer ${p}`)));
    const prepared = prepareIntents([
      sized('vpc:a', 60),
      sized('vpc:b', 30),
      sized('vpc:c', 50),
      sized('vpc:d', 40),
      sized('vpc:e', 20),
    ]);
    const round = packRound(heads(prepared), 100);
    const sizes = round.requests.map((r) => r.reduce((n, item) => n + item.writes.length, 0));
    expect(sizes).toEqual([100, 100]); // 60+40, 50+30+20
    expect(round.requests.map((r) => r.map((i) => i.index))).toEqual([
      [0, 3],
      [1, 2, 4],
    ]);
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
    intent('project:p', {
      writes: [{ ...tupleKey('user:1 viewer project:p'), condition }],
      deletes: [{ ...tupleKey('user:2 viewer project:p'), condition }],
    }),
  ]);
  expect(writeRequestBody([item!])).toEqual({
    writes: [{ user: 'user:1', relation: 'viewer', object: 'project:p', condition }],
    deletes: [{ user: 'user:2', relation: 'viewer', object: 'project:p' }],
  });
});

describe('a batch against the real OpenFGA', () => {
  test('250 intents of mixed sizes: few requests, none over 100 operations or naming a key twice, no intent split', async () => {
    const recorder = recordingClient(new OpenFgaClient(openFgaClientConfig(fga.storeId, fga.authorizationModelId)));
    const events: OpenFgaWriteEvent[] = [];
    const sink = createOpenFgaSink({ client: recorder.client, onRequest: (event) => events.push(event) });
    const batch = [];
    const expected = new Map<string, Set<string>>();
    const apply = (kind: 'write' | 'delete', tuple: string) => {
      const object = tuple.split(' ')[2] as string;
      const set = expected.get(object) ?? new Set<string>();
      if (kind === 'write') set.add(tuple);
      else set.delete(tuple);
      expected.set(object, set);
    };
    for (let i = 0; i < 250; i += 1) {
      const object = `vpc:mix${i % 200}`; // partitions 0..49 get two intents each
      const size = 1 + ((i * 7) % 8);
      const tuples = Array.from({ length: size }, (_, j) => `user:u${i}x${j} viewer ${object}`);
      if (i >= 200 && i < 210) {
        // The second intent of these partitions deletes the first intent's first tuple: a later round.
        const first = `user:u${i - 200}x0 viewer ${object}`;
        batch.push(intent(object, { writes: tuples.map(tupleKey), deletes: [tupleKey(first)] }));
        tuples.forEach((t) => apply('write', t));
        apply('delete', first);
      } else if (i >= 210 && i < 215) {
        // Five partitions write one shared tuple: never in one request, nor in two in flight at once.
        tuples.push('user:shared viewer project:mix');
        batch.push(intent(object, writes(...tuples)));
        tuples.forEach((t) => apply('write', t));
      } else {
        batch.push(intent(object, writes(...tuples)));
        tuples.forEach((t) => apply('write', t));
      }
    }
    const operations = batch.reduce(
      (n, i) => n + (i.payload.writes?.length ?? 0) + (i.payload.deletes?.length ?? 0),
      0,
    );

    const outcomes = await sink.deliver(batch, noDeadline());

    expect(kinds(outcomes).every((k) => k === 'delivered')).toBe(true);
    const { bodies } = recorder;
    for (const body of bodies) {
      const keys = bodyKeys(body);
      expect(keys.length).toBeLessThanOrEqual(100);
      expect(new Set(keys).size).toBe(keys.length);
    }
    // Never split: each intent's operations all sit in one request, and every operation was sent once.
    for (const item of batch) {
      const own = bodyKeys({ writes: [...(item.payload.writes ?? [])], deletes: [...(item.payload.deletes ?? [])] });
      expect(bodies.some((body) => own.every((k) => bodyKeys(body).includes(k)))).toBe(true);
    }
    expect(bodies.reduce((n, body) => n + bodyKeys(body).length, 0)).toBe(operations);
    expect(bodies.filter((body) => bodyKeys(body).includes('user:shared viewer project:mix'))).toHaveLength(5);
    // Packed: the minimum is ceil(ops / 100) = 12 requests. The shared key needs five rounds (one
    // partition per round), which adds at most one request per extra round (15 observed).
    expect(bodies.length).toBeLessThanOrEqual(Math.ceil(operations / 100) + 4);
    expect(events).toHaveLength(bodies.length);
    expect(events.every((e) => e.result === 'delivered')).toBe(true);
    // And the store holds exactly what the intents, applied in order, say.
    for (const [object, tuples] of expected) expect(await storedOn(fga.client, object)).toEqual([...tuples].sort());
  });
});
