import { describe, expect, test } from 'vitest';
import { PartitionFence } from './partition-fence.js';

describe('PartitionFence', () => {
  test('a call for a partition another call holds waits until that one lets go; other partitions go at once', async () => {
    const fence = new PartitionFence();
    const order: string[] = [];
    const leaveFirst = await fence.enter(['a', 'b']);
    const second = fence.enter(['b', 'c']).then((leave) => (order.push('second'), leave));
    const other = fence.enter(['d']).then((leave) => (order.push('other'), leave));
    await (
      await other
    )();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(order).toEqual(['other']);
    order.push('first leaves');
    leaveFirst();
    (await second)();
    expect(order).toEqual(['other', 'first leaves', 'second']);
    expect(fence.size).toBe(0);
  });

  test('two waiters for one partition go one after the other, never together', async () => {
    const fence = new PartitionFence();
    let inside = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 5 }, async () => {
        const leave = await fence.enter(['a']);
        inside += 1;
        most = Math.max(most, inside);
        await new Promise((resolve) => setTimeout(resolve, 5));
        inside -= 1;
        leave();
      }),
    );
    expect(most).toBe(1);
  });
});
