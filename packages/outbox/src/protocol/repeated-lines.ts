/**
 * Remembers what a runner last logged of each kind, so a periodic pass logs a standing state (a
 * refused row waiting, rows superseded, a database that stays down) when it changes and at most once
 * every `remindEveryMs` while it stays the same: one line a pass would bury everything else.
 */
export class RepeatedLines {
  private readonly last = new Map<string, { readonly signature: string; readonly at: number }>();

  constructor(private readonly remindEveryMs: number) {}

  /** Whether a line of `kind` saying `signature` should be logged now; records it when so. */
  due(kind: string, signature: string, now = performance.now()): boolean {
    const previous = this.last.get(kind);
    if (previous?.signature === signature && now - previous.at < this.remindEveryMs) return false;
    this.last.set(kind, { signature, at: now });
    return true;
  }

  /** The state of `kind` is over; whether it had been logged (its next report is new either way). */
  clear(kind: string): boolean {
    return this.last.delete(kind);
  }
}
