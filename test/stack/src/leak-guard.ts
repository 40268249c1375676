import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/** pg clients connected in this test file and not yet ended, with where they were opened. */
const openClients = new Map<pg.Client, string>();
let installed = false;

/**
 * Records every pg connection opened in this worker (pools included: they connect through
 * pg.Client), so that a test file which leaves a pool, a drainer or a listener open fails.
 */
export function installLeakGuard(): void {
  if (installed) return;
  installed = true;
  const connect = pg.Client.prototype.connect as (this: pg.Client, ...args: unknown[]) => unknown;
  pg.Client.prototype.connect = function patchedConnect(this: pg.Client, ...args: unknown[]) {
    const opened = new Error('opened here').stack?.split('\n').slice(2, 9).join('\n') ?? '';
    openClients.set(this, opened);
    this.once('end', () => openClients.delete(this));
    return connect.apply(this, args);
  } as typeof pg.Client.prototype.connect;
}

function childProcessCount(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'ProcessWrap').length;
}

/** Child processes alive when the file started (the baseline the guard compares with). */
export const baselineChildren = childProcessCount();

/**
 * Fails when pg connections or child processes opened by the file are still open. Waits up to
 * `graceMs` first: closing is asynchronous.
 */
export async function assertNoLeaks(graceMs = 3_000): Promise<void> {
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && (openClients.size > 0 || childProcessCount() > baselineChildren)) {
    await sleep(50);
  }
  const problems: string[] = [];
  if (openClients.size > 0) {
    problems.push(
      `${openClients.size} Postgres connection(s) still open (end the pool / stop the drainer):\n` +
        [...new Set(openClients.values())].join('\n---\n'),
    );
  }
  const children = childProcessCount() - baselineChildren;
  if (children > 0) problems.push(`${children} child process(es) still running (stop what you spawned)`);
  if (problems.length > 0) {
    for (const client of openClients.keys()) await client.end().catch(() => undefined);
    openClients.clear();
    throw new Error(`leak guard: ${problems.join('\n')}`);
  }
}
