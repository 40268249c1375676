/**
 * The sink calls of one drainer in flight, by partition key. A batch whose claim overlaps a call
 * still running — an earlier batch of this process whose session died, releasing its row locks while
 * its Write was on the wire — waits for that call to end before it sends its own: inside one process
 * at most one request per partition is ever in flight (docs/design.md §5, "Open batches").
 */
export class PartitionFence {
  private readonly inFlight = new Map<string, Promise<void>>();

  /**
   * Resolves once no call holds any of `keys`, holding them from then on; the returned function
   * lets them go. Waiters are served as the calls they wait for end (no order among them is promised).
   */
  async enter(keys: Iterable<string>): Promise<() => void> {
    const wanted = [...new Set(keys)];
    for (;;) {
      const blocking = new Set<Promise<void>>();
      for (const key of wanted) {
        const call = this.inFlight.get(key);
        if (call) blocking.add(call);
      }
      if (blocking.size === 0) break;
      await Promise.all(blocking);
    }
    let release!: () => void;
    const call = new Promise<void>((resolve) => (release = resolve));
    for (const key of wanted) this.inFlight.set(key, call);
    return () => {
      for (const key of wanted) if (this.inFlight.get(key) === call) this.inFlight.delete(key);
      release();
    };
  }

  /** Partition keys with a call in flight (for tests and diagnostics). */
  get size(): number {
    return this.inFlight.size;
  }
}
