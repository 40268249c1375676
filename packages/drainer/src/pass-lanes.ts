/**
 * The lanes of one pass (docs/design.md §5, "Open batches"): each lane runs batches one after
 * another on a connection of its own, so up to `max` batches are open at once. The first lane opens
 * with the pass; another opens when more is claimable ({@link PassLanes.want}) and every open lane
 * has been delivering for longer than its claim took: only a sink slower than a claim gains from
 * another batch, and with a fast one the lanes would only contend for the table. The pass is over
 * when the last open lane ends; a lane that fails, or a batch that moved nothing, ends the others
 * after their current batch.
 */
export class PassLanes {
  readonly #max: number;
  readonly #lane: (lanes: PassLanes) => Promise<void>;
  #open = 0;
  #over = false;
  #stalled = false;
  #failure: { readonly error: unknown } | undefined;
  readonly #finished: Promise<void>;
  #settle!: { resolve: () => void; reject: (error: unknown) => void };
  /** More is claimable than the open lanes hold: a claim stopped at a limit, or a kick came. */
  #wanted = false;
  /** The deliveries in flight, one per delivering lane: when each began, and the claim time it must outlast. */
  readonly #deliveries = new Set<{ readonly since: number; readonly claimMs: number }>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** Opens the first lane at once; `lane` runs one lane to its end (it should end soon once {@link failed} is true). */
  constructor(max: number, lane: (lanes: PassLanes) => Promise<void>) {
    this.#max = max;
    this.#lane = lane;
    this.#finished = new Promise<void>((resolve, reject) => (this.#settle = { resolve, reject }));
    this.widen();
  }

  /** Resolves once every lane has ended; rejects with the first lane's failure, after the others ended too. */
  get finished(): Promise<void> {
    return this.#finished;
  }

  /** True once a lane failed: the others stop after their current batch and no lane opens. */
  get failed(): boolean {
    return this.#failure !== undefined;
  }

  /**
   * True once a batch moved nothing (every intent failed transiently or was released): the target
   * is likely down, so the pass ends as a one-batch pass would, instead of each lane spending an
   * attempt of rows whose backoff is short. No lane opens; the others stop after their current batch.
   */
  get stalled(): boolean {
    return this.#stalled;
  }

  /** Marks the pass {@link stalled}. */
  stall(): void {
    this.#stalled = true;
  }

  /** Lanes running now. */
  get open(): number {
    return this.#open;
  }

  /**
   * Says whether more is claimable than the open lanes hold (true after a claim that stopped at a
   * limit, or a kick; false after a claim that took all there was). Another lane opens once every
   * open lane has been delivering for longer than its claim took.
   */
  want(more = true): void {
    this.#wanted = more;
    this.#consider();
  }

  /** A lane's batch, claimed in `claimMs`, is being delivered; call the answer when its delivery is over. */
  delivering(claimMs: number): () => void {
    const delivery = { since: performance.now(), claimMs };
    this.#deliveries.add(delivery);
    this.#consider();
    return () => {
      this.#deliveries.delete(delivery);
      this.#consider();
    };
  }

  /** Opens one more lane, unless `max` are open, a lane failed, the pass stalled, or it is over. True if it opened one. */
  widen(): boolean {
    if (!this.#roomForLane()) return false;
    this.#open += 1;
    // A microtask later, so that a lane never runs inside its opener's call stack.
    void Promise.resolve()
      .then(() => this.#lane(this))
      .catch((error: unknown) => {
        this.#failure ??= { error };
      })
      .finally(() => {
        this.#open -= 1;
        if (this.#open > 0) return this.#consider();
        this.#over = true;
        this.#consider();
        if (this.#failure) this.#settle.reject(this.#failure.error);
        else this.#settle.resolve();
      });
    return true;
  }

  /** Fewer than `max` lanes are open, and the pass is neither over, failed nor stalled. */
  #roomForLane(): boolean {
    return !this.#over && !this.#failure && !this.#stalled && this.#open < this.#max;
  }

  /** Opens a lane now, or arms the timer for when the open lanes will all have outlasted their claims. */
  #consider(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    // A lane still claiming or settling takes what is claimable next itself.
    if (!this.#wanted || this.#deliveries.size < this.#open || !this.#roomForLane()) return;
    let readyAt = 0;
    for (const d of this.#deliveries) readyAt = Math.max(readyAt, d.since + d.claimMs);
    const wait = readyAt - performance.now();
    if (wait > 0) {
      this.#timer = setTimeout(() => this.#consider(), Math.ceil(wait));
      return;
    }
    this.#wanted = false; // the new lane's own claim says whether more is left
    this.widen();
  }
}

/**
 * Lets one lane at a time wait for a pooled connection: a pass then queues one request on the pool
 * at most, however many lanes it runs, and a service's own queries are never queued behind several.
 */
export class ConnectionTurns {
  #tail: Promise<void> = Promise.resolve();

  /** Waits for the turns before this one, then for `acquire`, which calls `granted` once it holds its connection. */
  async take<T>(acquire: (granted: () => void) => Promise<T>): Promise<T> {
    let granted!: () => void;
    const mine = new Promise<void>((resolve) => (granted = resolve));
    const before = this.#tail;
    this.#tail = before.then(() => mine);
    await before;
    try {
      return await acquire(granted);
    } finally {
      granted(); // a checkout that failed gives up its turn too
    }
  }
}
