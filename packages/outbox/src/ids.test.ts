import { describe, expect, test } from 'vitest';
import { compareIds } from './ids.js';

describe('compareIds', () => {
  test('orders decimal ids as numbers, past the range of doubles', () => {
    const ids = ['10', '9', '100', '2', '9007199254740993', '9007199254740992', '1', '11'];
    expect([...ids].sort(compareIds)).toEqual(
      [...ids].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0)),
    );
    expect(compareIds('42', '42')).toBe(0);
    expect(Math.sign(compareIds('99', '100'))).toBe(-1);
  });
});
