import { sleep } from './statistics.js';

/** What {@link paceWriters} runs. */
export interface PacedWriters {
  /** Writers side by side; a writer waits for its write before it takes the next slot. */
  readonly writers: number;
  /** Writes per second offered (Infinity: as fast as the writers go). */
  readonly rate: number;
  readonly seconds: number;
  /** Write number `i` (0-based, in slot order). */
  write(i: number): Promise<void>;
}

/**
 * Offers `rate` writes a second for `seconds`: write i is due at i / rate, taken by the first free
 * writer (late when every writer is busy, never skipped). Returns how many were written and how long it took.
 */
export async function paceWriters(options: PacedWriters): Promise<{ written: number; seconds: number }> {
  const started = performance.now();
  const end = started + options.seconds * 1000;
  let next = 0;
  let written = 0;
  await Promise.all(
    Array.from({ length: options.writers }, async () => {
      for (;;) {
        const i = next++;
        const due = started + (Number.isFinite(options.rate) ? (i * 1000) / options.rate : 0);
        if (due >= end || performance.now() >= end) return;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        await options.write(i);
        written += 1;
      }
    }),
  );
  return { written, seconds: (performance.now() - started) / 1000 };
}
