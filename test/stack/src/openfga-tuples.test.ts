import { describe, expect, test } from 'vitest';
import { stored, storedOn, tupleKey } from './openfga-tuples.js';
import { useOpenFgaStore } from './test-context.js';

const fga = useOpenFgaStore();

describe('reading tuples back from a real OpenFGA store', () => {
  test('stored is true for the exact key only, not for one a check allows through the model', async () => {
    await fga.client.write({ writes: [tupleKey('project:rp project vpc:rv'), tupleKey('user:ann viewer project:rp')] });
    expect(await stored(fga.client, tupleKey('user:ann viewer project:rp'))).toBe(true);
    expect((await fga.client.check(tupleKey('user:ann viewer vpc:rv'))).allowed).toBe(true);
    expect(await stored(fga.client, tupleKey('user:ann viewer vpc:rv'))).toBe(false);
    expect(await stored(fga.client, tupleKey('user:bob viewer project:rp'))).toBe(false);
  });

  test('storedOn reads every page (more than the 100 a page holds), sorted, and nothing of other objects', async () => {
    const viewers = Array.from({ length: 130 }, (_, i) => `user:u${String(i).padStart(3, '0')} viewer project:many`);
    for (let i = 0; i < viewers.length; i += 100)
      await fga.client.write({ writes: viewers.slice(i, i + 100).map(tupleKey) });
    await fga.client.write({ writes: [tupleKey('user:u000 viewer project:other')] });
    expect(await storedOn(fga.client, 'project:many')).toEqual([...viewers].sort());
    expect(await storedOn(fga.client, 'project:none')).toEqual([]);
  });
});
