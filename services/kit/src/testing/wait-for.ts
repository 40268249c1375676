import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `probe` until it returns true (or throws the last error after `timeoutMs`). */
export async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}
