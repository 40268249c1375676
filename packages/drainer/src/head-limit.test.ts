import { describe, expect, test } from 'vitest';
import { initialHeadLimit, nextHeadLimit, type HeadLimit } from './head-limit.js';

const after = (limit: HeadLimit, claimedHeads: number, partitions: number, withNextHead: number, batchSize = 100) =>
  nextHeadLimit(limit, { batchSize, claimedHeads, settled: { partitions, withNextHead } });

describe('the head limit', () => {
  test('starts at a whole batch of heads, with runs', () => {
    expect(initialHeadLimit(20)).toEqual({ heads: 20, runs: true });
  });

  test('halves while most settled partitions still have rows after their run, down to one', () => {
    let limit = initialHeadLimit(20);
    const seen: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      limit = after(limit, Math.min(limit.heads, 8), 8, 8, 20);
      seen.push(limit.heads);
    }
    // 8 partitions held heads at first: the limit halves from the 8 claimed, not from 20.
    expect(seen).toEqual([4, 2, 1, 1, 1]);
    expect(limit.runs).toBe(true);
  });

  test('exactly half the partitions with a next head still halves', () => {
    expect(after({ heads: 10, runs: true }, 10, 10, 5).heads).toBe(5);
  });

  test('doubles while most settled partitions run dry, up to the batch size', () => {
    expect(after({ heads: 4, runs: true }, 4, 4, 1).heads).toBe(8);
    expect(after({ heads: 60, runs: true }, 60, 60, 0).heads).toBe(100);
  });

  test('skips runs after a batch of mostly heads found no next head, and looks again once one does', () => {
    const headsOnly = after(initialHeadLimit(100), 100, 100, 0);
    expect(headsOnly).toEqual({ heads: 100, runs: false });
    expect(after(headsOnly, 100, 100, 1).runs).toBe(true);
    // A batch of few heads that found no next head keeps looking for runs.
    expect(after(initialHeadLimit(100), 49, 49, 0).runs).toBe(true);
    expect(after(initialHeadLimit(100), 50, 50, 0).runs).toBe(false);
  });

  test('a batch that settled no partition leaves the limit as it was', () => {
    const limit = { heads: 3, runs: false };
    expect(after(limit, 3, 0, 0)).toBe(limit);
  });
});
