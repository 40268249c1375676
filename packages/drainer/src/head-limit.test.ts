import { describe, expect, test } from 'vitest';
import { initialHeadLimit, nextHeadLimit, type HeadLimit } from './head-limit.js';

/** The limit after a batch of `claimed` rows (default: one per head) over `claimedHeads` heads. */
const after = (
  limit: HeadLimit,
  claimedHeads: number,
  partitions: number,
  withNextHead: number,
  batchSize = 100,
  claimed = claimedHeads,
) => nextHeadLimit(limit, { batchSize, claimed, claimedHeads, settled: { partitions, withNextHead } });

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

  test('while most settled partitions run dry, rises to the heads that fill a batch at the rows each took, up to the batch size', () => {
    // 6 partitions of 10 rows ran dry in a batch of 60: 10 such partitions fill 100.
    expect(after({ heads: 6, runs: true }, 6, 6, 0, 100, 60).heads).toBe(10);
    // A full batch of dry partitions keeps the limit; so does one that took fewer heads than it allowed.
    expect(after({ heads: 10, runs: true }, 10, 10, 0, 100, 100).heads).toBe(10);
    expect(after({ heads: 100, runs: true }, 3, 3, 0, 100, 30).heads).toBe(100);
    expect(after({ heads: 4, runs: true }, 4, 4, 1).heads).toBe(100);
    expect(after({ heads: 60, runs: true }, 60, 60, 0).heads).toBe(100);
  });

  test('on partitions of 10 rows it settles at 10 heads a batch, each batch full', () => {
    // The claim as it shares room: heads, the first run whole, the others room / (heads - 1) each.
    const partitionRows = 10;
    const claim = (heads: number) => {
      const room = 100 - heads - (partitionRows - 1);
      const share = heads > 1 ? Math.min(partitionRows - 1, Math.floor(room / (heads - 1))) : 0;
      const others = Math.max(0, share) * (heads - 1);
      return { claimed: heads + (partitionRows - 1) + others, withNextHead: share < partitionRows - 1 ? heads - 1 : 0 };
    };
    let limit = initialHeadLimit(100);
    const sizes: number[] = [];
    for (let i = 0; i < 8; i += 1) {
      const heads = limit.heads;
      const { claimed, withNextHead } = heads === 100 ? { claimed: 100, withNextHead: 100 } : claim(heads);
      sizes.push(claimed);
      limit = after(limit, heads, heads, withNextHead, 100, claimed);
    }
    expect(sizes.slice(-3)).toEqual([100, 100, 100]);
    expect(limit.heads).toBe(10);
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
