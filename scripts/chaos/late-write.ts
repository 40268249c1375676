import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HeldRequest } from '@outbox/test-stack';
import type { DrainerFleet } from './drainer-fleet.js';
import type { Random } from './seeded-random.js';
import type { Workload } from './workload.js';

/** How the held drainer loses its claim. */
export type ClaimLoss = 'kill' | 'terminate';

/** One attempt at a late write, and what came of it. */
export interface LateWriteAttempt {
  readonly drainer: number;
  readonly how: ClaimLoss;
  /**
   * `late-write`: OpenFGA accepted the Write after its drainer had lost the claim; `idle`: the drainer
   * sent nothing to hold; `no-backend`: it had no backend to terminate; `not-answered`: the held
   * Write never got an answer (OpenFGA restarted meanwhile, say); `refused`: OpenFGA refused it;
   * `not-late`: it was forwarded before the claim was lost (the machine was too slow to keep up).
   */
  readonly outcome: 'late-write' | 'idle' | 'no-backend' | 'not-answered' | 'refused' | 'not-late';
  /** Objects the held Write named. */
  readonly objects: readonly string[];
  /** `Date.now()` when the Write was held (0 when none came), when the claim was lost, when OpenFGA answered. */
  readonly heldAt: number;
  readonly lostAt?: number;
  readonly answeredAt?: number;
  /** Backends ended (`terminate`). */
  readonly backendsTerminated?: number;
}

/** What `provokeLateWrite` needs. */
export interface LateWriteContext {
  readonly fleet: DrainerFleet;
  readonly workload: Workload;
  readonly random: Random;
  readonly holdMs: number;
  readonly signal: AbortSignal;
}

/** How long to wait for the drainer's next Write before giving up on this attempt. */
const WAIT_FOR_WRITE_MS = 3_000;
/** Objects of a held Write the workload contradicts (a Write carries up to 50 intents). */
const CONTRADICTIONS_PER_ATTEMPT = 5;

interface WriteBody {
  readonly writes?: { readonly tuple_keys?: ReadonlyArray<{ readonly object: string }> };
  readonly deletes?: { readonly tuple_keys?: ReadonlyArray<{ readonly object: string }> };
}

/** The objects a held Write request registers (writes) and deregisters (deletes), from its JSON body. */
function objectsIn(request: Buffer): Map<string, 'register' | 'deregister'> {
  const text = request.toString('utf8');
  const objects = new Map<string, 'register' | 'deregister'>();
  let body: WriteBody;
  try {
    body = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as WriteBody;
  } catch {
    return objects; // not a whole JSON body (a chunked one, say): nothing to contradict
  }
  for (const key of body.writes?.tuple_keys ?? []) objects.set(key.object, 'register');
  for (const key of body.deletes?.tuple_keys ?? []) objects.set(key.object, 'deregister');
  return objects;
}

async function nextEvent(
  fleet: DrainerFleet,
  drainer: number,
  type: 'held' | 'answered',
  requestId: number | undefined,
  timeoutMs: number,
  signal: AbortSignal,
) {
  const events = fleet.slots[drainer]?.proxyEvents;
  if (!events) return undefined;
  const wait = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]);
  try {
    for (;;) {
      const [event] = (await once(events, type, { signal: wait })) as [{ request: HeldRequest }];
      if (requestId === undefined || event.request.id === requestId) return event.request;
    }
  } catch (error) {
    if (signal.aborted) throw error;
    return undefined; // timed out
  }
}

/**
 * Makes a late write happen (docs/design.md §9): holds the drainer's next Write in its proxy, has
 * the workload contradict the objects it names (a delete right after a create), then kills the drainer
 * or terminates its backends while the Write is still held. Its row locks go with it, another drainer
 * delivers the intents and their reversals, and the held Write reaches OpenFGA last.
 *
 * @example
 * const attempt = await provokeLateWrite({ fleet, workload, random, holdMs: 3_000, signal }, 0, 'kill');
 */
export async function provokeLateWrite(
  context: LateWriteContext,
  drainer: number,
  how: ClaimLoss,
): Promise<LateWriteAttempt> {
  const { fleet, workload, random, holdMs, signal } = context;
  const proxy = fleet.slots[drainer]?.proxy;
  if (!proxy) throw new RangeError(`no drainer ${drainer}`);
  proxy.holdRequests(1, holdMs);
  const held = await nextEvent(fleet, drainer, 'held', undefined, WAIT_FOR_WRITE_MS, signal);
  if (!held) {
    proxy.holdRequests(0);
    return { drainer, how, outcome: 'idle', objects: [], heldAt: 0 };
  }
  const answered = nextEvent(fleet, drainer, 'answered', held.id, holdMs + 15_000, signal).catch(() => undefined);
  await sleep(50, undefined, { signal }); // the rest of the request (a body sent apart from its headers)
  const named = objectsIn(proxy.heldRequests().find((r) => r.id === held.id)?.bytes ?? held.bytes);
  const objects = [...named.keys()];
  const contradictions = [...named]
    .slice(0, CONTRADICTIONS_PER_ATTEMPT)
    .map(([object, kind]) => workload.contradict(object, kind));
  // Lose the claim a quarter to half-way into the hold: the contradicting intents have committed by then.
  await sleep(Math.max(0, held.heldAt + random.int(holdMs / 4, holdMs / 2) - Date.now()), undefined, { signal });
  await Promise.all(contradictions);
  let lostAt: number;
  let backendsTerminated: number | undefined;
  if (how === 'kill') {
    await fleet.kill(drainer);
    lostAt = Date.now();
  } else {
    backendsTerminated = await fleet.terminateBackends(drainer);
    lostAt = Date.now();
    if (backendsTerminated === 0) return { drainer, how, outcome: 'no-backend', objects, heldAt: held.heldAt };
  }
  const answer = await answered;
  if (!answer?.response)
    return { drainer, how, outcome: 'not-answered', objects, heldAt: held.heldAt, lostAt, backendsTerminated };
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer.response)?.[1]);
  const outcome = !(status >= 200 && status < 300)
    ? 'refused'
    : (answer.releasedAt ?? 0) <= lostAt
      ? 'not-late'
      : 'late-write';
  return { drainer, how, outcome, objects, heldAt: held.heldAt, lostAt, answeredAt: Date.now(), backendsTerminated };
}
