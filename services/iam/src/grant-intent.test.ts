import { validatePayload } from '@outbox/outbox';
import { describe, expect, test } from 'vitest';
import { grantIntent } from './grant-intent.js';

const names = (keys: readonly { relation: string }[] | undefined) => (keys ?? []).map((k) => k.relation);

describe('grantIntent', () => {
  test('every intent is the whole new state: the set written, every other grantable relation deleted', () => {
    const intent = grantIntent('user:bob', 'project:p1', ['viewer'], ['editor', 'owner']);
    expect(intent.changed).toBe(true);
    expect(names(intent.payload.writes)).toEqual(['owner', 'editor']);
    expect(names(intent.payload.deletes)).toEqual(['viewer']);
    expect(intent.payload.relations).toEqual(['owner', 'editor']);
    expect(intent.payload.writes?.[0]).toEqual({ user: 'user:bob', relation: 'owner', object: 'project:p1' });
    expect(() => validatePayload(intent.payload)).not.toThrow();
    // Not a diff: relations neither held before nor now are deleted too, held ones written again.
    const grown = grantIntent('user:bob', 'project:p1', ['viewer'], ['viewer', 'editor']);
    expect([names(grown.payload.writes), names(grown.payload.deletes)]).toEqual([['editor', 'viewer'], ['owner']]);
  });

  test('an unchanged set (empty included) gives the same whole-state intent, marked unchanged', () => {
    const same = grantIntent('user:bob', 'project:p1', ['editor'], ['editor']);
    expect([same.changed, names(same.payload.writes), names(same.payload.deletes)]).toEqual([
      false,
      ['editor'],
      ['owner', 'viewer'],
    ]);
    const none = grantIntent('user:bob', 'project:p1', [], []);
    expect([names(none.payload.writes), names(none.payload.deletes)]).toEqual([[], ['owner', 'editor', 'viewer']]);
    expect(() => validatePayload(none.payload)).not.toThrow();
  });
});
