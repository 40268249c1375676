import { setTimeout as sleep } from 'node:timers/promises';
import { StackError } from './stack-error.js';

/**
 * Polls `probe` until it resolves truthy, or fails after `timeoutMs` with a StackError that names
 * `what` and carries the last probe failure as its cause.
 */
export async function waitFor(
  what: string,
  probe: () => Promise<boolean>,
  options: { timeoutMs: number; intervalMs?: number; abortIf?: () => string | undefined },
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  let lastError: unknown;
  for (;;) {
    const reason = options.abortIf?.();
    if (reason !== undefined) throw new StackError(`${what}: ${reason}`, { cause: lastError });
    try {
      if (await probe()) return;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new StackError(`${what}: not healthy after ${options.timeoutMs} ms`, { cause: lastError });
    }
    await sleep(options.intervalMs ?? 100);
  }
}
