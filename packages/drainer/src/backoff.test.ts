import { describe, expect, test } from 'vitest';
import { backoffDelayMs } from './backoff.js';

describe('backoff', () => {
  test('grows exponentially under full jitter and stops at the cap', () => {
    const top = () => 0.999_999;
    expect(backoffDelayMs(0, { baseMs: 100, maxMs: 10_000 }, top)).toBe(99);
    expect(backoffDelayMs(3, { baseMs: 100, maxMs: 10_000 }, top)).toBe(799);
    expect(backoffDelayMs(20, { baseMs: 100, maxMs: 10_000 }, top)).toBe(9_999);
    expect(backoffDelayMs(5, { baseMs: 100, maxMs: 10_000 }, () => 0)).toBe(0);
  });
  test('defaults: 1 s base, 5 min cap', () => {
    expect(backoffDelayMs(0, {}, () => 0.5)).toBe(500);
    expect(backoffDelayMs(50, {}, () => 0.5)).toBe(150_000);
  });
  test('defaults, maxAttempts 10: the 9 delays before the 10th (poisoning) attempt total at most 511 s (~8.5 min), 255.5 s (~4.3 min) on average', () => {
    // attemptCount of the failed attempts 1..9 is 0..8; the 10th failure poisons, no delay follows.
    const ceilings = Array.from({ length: 9 }, (_, n) => backoffDelayMs(n, {}, () => 1));
    expect(ceilings).toEqual([1, 2, 4, 8, 16, 32, 64, 128, 256].map((s) => s * 1_000));
    expect(ceilings.reduce((a, b) => a + b, 0)).toBe(511_000);
    const mean = Array.from({ length: 9 }, (_, n) => backoffDelayMs(n, {}, () => 0.5)).reduce((a, b) => a + b, 0);
    expect(mean).toBe(255_500);
    // The 5 min cap first bounds the delay after a 10th failure, which never comes at maxAttempts 10.
    expect(backoffDelayMs(9, {}, () => 1)).toBe(300_000);
  });
});
