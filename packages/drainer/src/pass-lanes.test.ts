import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { ConnectionTurns, PassLanes } from './pass-lanes.js';

// The scheduling of a pass's lanes, without a database: lanes are promises the test settles.

/** A lane the test ends by hand, and a record of which lanes ran. */
function manualLanes() {
  const ends: Array<{ resolve: () => void; reject: (error: unknown) => void }> = [];
  const lane = () => new Promise<void>((resolve, reject) => void ends.push({ resolve, reject }));
  const started = async () => {
    await Promise.resolve(); // a lane starts a microtask after it is opened
    await Promise.resolve();
    return ends.length;
  };
  return { ends, lane, started };
}

describe('PassLanes', () => {
  test('the first lane opens with the pass; widen opens more up to the limit and no more; the pass is over when the last lane ends', async () => {
    const { ends, lane, started } = manualLanes();
    const lanes = new PassLanes(3, lane);
    expect(await started()).toBe(1);
    expect([lanes.widen(), lanes.widen(), lanes.widen()]).toEqual([true, true, false]);
    expect(await started()).toBe(3);
    expect(lanes.open).toBe(3);
    let over = false;
    void lanes.finished.then(() => (over = true));
    ends[0]!.resolve();
    ends[1]!.resolve();
    await started();
    expect(over).toBe(false);
    // Room again while one lane still runs: a lane opens in the same pass.
    expect(lanes.widen()).toBe(true);
    expect(await started()).toBe(4);
    ends[2]!.resolve();
    ends[3]!.resolve();
    await lanes.finished;
    // Over: a widen that comes late (a kick racing the end) opens nothing.
    expect(lanes.widen()).toBe(false);
    expect(await started()).toBe(4);
  });

  test('a lane that fails: the others are told, no lane opens, and the pass fails with the first error only once every lane has ended', async () => {
    const { ends, lane, started } = manualLanes();
    const lanes = new PassLanes(4, lane);
    lanes.widen();
    lanes.widen();
    expect(await started()).toBe(3);
    const first = new Error('first');
    ends[1]!.reject(first);
    ends[2]!.reject(new Error('second'));
    let outcome: unknown;
    void lanes.finished.catch((error: unknown) => (outcome = error));
    await started();
    expect(lanes.failed).toBe(true);
    expect(lanes.widen()).toBe(false);
    expect(outcome).toBeUndefined(); // lane 0 still delivers its batch
    ends[0]!.resolve();
    await lanes.finished.catch(() => undefined);
    expect(outcome).toBe(first);
  });

  test('one lane: the pass is that lane', async () => {
    const { ends, lane, started } = manualLanes();
    const lanes = new PassLanes(1, lane);
    expect(lanes.widen()).toBe(false);
    expect(await started()).toBe(1);
    ends[0]!.resolve();
    await expect(lanes.finished).resolves.toBeUndefined();
  });
});

describe('PassLanes: when another lane opens', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] }));
  afterEach(() => vi.useRealTimers());

  test('a delivery faster than its claim opens no lane, however much is claimable (a fast sink: lanes would only contend)', async () => {
    const { lane, started } = manualLanes();
    const lanes = new PassLanes(3, lane);
    expect(await started()).toBe(1);
    for (let batch = 0; batch < 5; batch += 1) {
      lanes.want(true);
      const over = lanes.delivering(2);
      await vi.advanceTimersByTimeAsync(1);
      over();
      await vi.advanceTimersByTimeAsync(10); // the lane settles and claims again
    }
    expect(await started()).toBe(1);
  });

  test('a delivery that outlasts its claim opens one lane then; a third waits until both lanes deliver past their claims', async () => {
    const { lane, started } = manualLanes();
    const lanes = new PassLanes(3, lane);
    lanes.want(true);
    lanes.delivering(5);
    await vi.advanceTimersByTimeAsync(4);
    expect(await started()).toBe(1);
    await vi.advanceTimersByTimeAsync(2);
    expect(await started()).toBe(2);
    // The new lane's claim stopped at a limit too; while it has not begun delivering, nothing opens.
    lanes.want(true);
    await vi.advanceTimersByTimeAsync(100);
    expect(await started()).toBe(2);
    lanes.delivering(3);
    await vi.advanceTimersByTimeAsync(2);
    expect(await started()).toBe(2);
    await vi.advanceTimersByTimeAsync(2);
    expect(await started()).toBe(3);
    // At the limit: nothing more, whatever is claimable.
    lanes.want(true);
    lanes.delivering(0);
    await vi.advanceTimersByTimeAsync(100);
    expect(lanes.open).toBe(3);
  });

  test('nothing more claimable (a claim that took all there was), or a stalled or failed pass: a slow delivery opens nothing', async () => {
    const { ends, lane, started } = manualLanes();
    const lanes = new PassLanes(3, lane);
    lanes.want(true);
    lanes.want(false);
    const over = lanes.delivering(1);
    await vi.advanceTimersByTimeAsync(50);
    expect(await started()).toBe(1);
    over();
    lanes.stall();
    lanes.want(true);
    lanes.delivering(1);
    await vi.advanceTimersByTimeAsync(50);
    expect(await started()).toBe(1);
    ends[0]!.resolve();
    await lanes.finished;
    // A kick racing the end of the pass opens nothing.
    lanes.want(true);
    await vi.advanceTimersByTimeAsync(50);
    expect(await started()).toBe(1);
  });

  test('a delivery that ends before its claim time arms nothing: a kick during the next, slow delivery opens a lane', async () => {
    const { lane, started } = manualLanes();
    const lanes = new PassLanes(2, lane);
    lanes.want(true);
    lanes.delivering(10)();
    await vi.advanceTimersByTimeAsync(50);
    expect(await started()).toBe(1);
    lanes.want(false);
    lanes.delivering(10);
    await vi.advanceTimersByTimeAsync(20);
    expect(await started()).toBe(1);
    lanes.want(); // commits were notified
    expect(await started()).toBe(2);
  });
});

describe('ConnectionTurns', () => {
  test('one checkout waits at a time, in turn order; a checkout that fails gives its turn to the next', async () => {
    const turns = new ConnectionTurns();
    const waiting = new Set<number>();
    let mostWaiting = 0;
    const grants: Array<() => void> = [];
    const order: number[] = [];
    // A checkout that waits until the test grants it, then holds its connection until `release`.
    const checkout = (n: number, fail = false) =>
      turns.take(async (granted) => {
        waiting.add(n);
        mostWaiting = Math.max(mostWaiting, waiting.size);
        await new Promise<void>((resolve) => grants.push(resolve));
        waiting.delete(n);
        order.push(n);
        if (fail) throw new Error(`checkout ${n} failed`);
        granted();
        await new Promise((resolve) => setTimeout(resolve, 5)); // holds it, as a lane's segment does
        return n;
      });
    const runs = [checkout(1), checkout(2, true), checkout(3)];
    const settled = Promise.allSettled(runs);
    for (let i = 0; i < 3; i += 1) {
      while (grants.length <= i) await new Promise((resolve) => setImmediate(resolve));
      // Only the checkout whose turn it is has asked the pool.
      expect(waiting.size).toBe(1);
      grants[i]!();
    }
    const results = await settled;
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(order).toEqual([1, 2, 3]);
    expect(mostWaiting).toBe(1);
  });
});
