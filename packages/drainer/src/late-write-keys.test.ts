import { describe, expect, test } from 'vitest';
import { keysAtRisk, lateWriteCorrections, tupleKeyOf } from './late-write-keys.js';

// What the late-write check compares and enqueues, from a partition's deliveries newest first.
const owner = { user: 'user:ann', relation: 'owner', object: 'vpc:1' };
const project = { user: 'project:p', relation: 'project', object: 'vpc:1' };
const viewer = {
  user: 'user:bob',
  relation: 'viewer',
  object: 'vpc:1',
  condition: { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } },
};

describe('keysAtRisk', () => {
  test('a key only written (or only deleted) in the window cannot be reversed by a late write: not at risk', () => {
    expect(keysAtRisk([{ writes: [owner] }, { writes: [owner, project] }])).toEqual([]);
    expect(keysAtRisk([{ deletes: [owner] }, { deletes: [owner] }])).toEqual([]);
  });

  test('a key written and deleted is at risk, with what the newest delivery says of it', () => {
    // register, deregister (newest first): the grant must be gone.
    expect(keysAtRisk([{ deletes: [owner, project] }, { writes: [owner, project] }])).toEqual([
      { tuple: owner, present: false },
      { tuple: project, present: false },
    ]);
    // deregister, then register again with a condition: the newest write, condition included.
    expect(
      keysAtRisk([
        { writes: [viewer] },
        { deletes: [{ user: viewer.user, relation: viewer.relation, object: viewer.object }] },
      ]),
    ).toEqual([{ tuple: viewer, present: true }]);
  });

  test('within one intent the writes apply after the deletes (one OpenFGA transaction)', () => {
    expect(keysAtRisk([{ deletes: [owner], writes: [owner] }])).toEqual([{ tuple: owner, present: true }]);
  });
});

describe('lateWriteCorrections', () => {
  test('writes what the target lacks, deletes what it should not hold (by key, no condition), nothing where it agrees', () => {
    const risks = [
      { tuple: owner, present: false },
      { tuple: viewer, present: true },
      { tuple: project, present: true },
    ];
    const live = new Set([tupleKeyOf(owner), tupleKeyOf(project)]);
    expect(lateWriteCorrections('vpc:1', risks, live)).toEqual([
      { partitionKey: 'vpc:1', payload: { writes: [viewer], deletes: [owner], source: 'late-write' } },
    ]);
    expect(lateWriteCorrections('vpc:1', [{ tuple: owner, present: true }], live)).toEqual([]);
  });

  test('at most 100 operations an intent', () => {
    const risks = Array.from({ length: 250 }, (_, i) => ({
      tuple: { user: `user:u${i}`, relation: 'viewer', object: 'vpc:1' },
      present: true,
    }));
    const intents = lateWriteCorrections('vpc:1', risks, new Set());
    expect(intents.map((i) => i.payload.writes?.length)).toEqual([100, 100, 50]);
  });
});
