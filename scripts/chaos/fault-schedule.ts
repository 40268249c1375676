import { setTimeout as sleep } from 'node:timers/promises';
import type { Fault } from './chaos-options.js';
import type { DrainerFleet } from './drainer-fleet.js';
import { provokeLateWrite, type LateWriteAttempt } from './late-write.js';
import type { RestartableOpenFga } from './openfga-restarts.js';
import type { Random } from './seeded-random.js';
import type { Workload } from './workload.js';

/** What the fault loop needs. */
export interface FaultContext {
  readonly fleet: DrainerFleet;
  readonly openfga: RestartableOpenFga;
  readonly workload: Workload;
  readonly random: Random;
  readonly faults: readonly Fault[];
  readonly holdMs: number;
  readonly faultEveryMs: number;
  readonly signal: AbortSignal;
  readonly log: (line: string) => void;
}

/** What the faults did. */
export interface FaultFigures {
  readonly kills: number;
  /** Termination faults, and the backends they ended (late-write provocations included). */
  readonly terminations: number;
  readonly backendsTerminated: number;
  readonly openfgaRestarts: number;
  readonly openfgaRestartsOnNewPort: number;
  readonly slowAnswers: number;
  readonly lateWriteAttempts: readonly LateWriteAttempt[];
}

/** Every other fault is a late-write provocation; the others are drawn by these weights (restarts come on a schedule). */
const WEIGHTS: Readonly<Record<Exclude<Fault, 'restart' | 'late-write'>, number>> = {
  kill: 3,
  terminate: 2,
  'slow-answer': 1,
};

/**
 * Injects faults one after another until `until`. Every other one is a late write provoked (see
 * late-write.ts); the others are drawn from: a drainer SIGKILLed (the fleet starts it again), some of
 * a drainer's backends terminated, a proxy delaying a drainer's answers (half the time with its
 * backends terminated meanwhile: the acknowledgement is lost, the intents are delivered again).
 * OpenFGA is restarted at evenly spaced times (one per 15 s, at least one), on a new port and the
 * same port in turn, the proxies retargeted.
 *
 * @example
 * const figures = await runFaults({ fleet, openfga, workload, random, faults: FAULTS, holdMs: 3_000, faultEveryMs: 1_500, signal, log }, Date.now() + 60_000);
 */
export async function runFaults(context: FaultContext, until: number): Promise<FaultFigures> {
  const { fleet, openfga, random, signal, log } = context;
  const figures = {
    kills: 0,
    terminations: 0,
    backendsTerminated: 0,
    openfgaRestarts: 0,
    openfgaRestartsOnNewPort: 0,
    slowAnswers: 0,
  };
  const lateWriteAttempts: LateWriteAttempt[] = [];
  const drawable = (Object.keys(WEIGHTS) as Array<keyof typeof WEIGHTS>).filter((f) => context.faults.includes(f));
  const started = Date.now();
  const restartCount = context.faults.includes('restart') ? Math.max(1, Math.floor((until - started) / 15_000)) : 0;
  const restartTimes = Array.from(
    { length: restartCount },
    (_, i) => started + ((i + 1) * (until - started)) / (restartCount + 1),
  );
  const alive = () => fleet.slots.map((s) => s.index).filter((i) => fleet.alive(i));

  let drawn = 0;
  const draw = (): Exclude<Fault, 'restart'> | undefined => {
    drawn += 1;
    if (context.faults.includes('late-write') && (drawn % 2 === 1 || drawable.length === 0)) return 'late-write';
    const total = drawable.reduce((sum, f) => sum + WEIGHTS[f], 0);
    let x = random.next() * total;
    for (const fault of drawable) {
      x -= WEIGHTS[fault];
      if (x < 0) return fault;
    }
    return drawable.at(-1);
  };

  while (Date.now() < until && !signal.aborted) {
    // Exponential gaps around the mean, bounded so that one draw cannot swallow the run.
    const gap = Math.min(3 * context.faultEveryMs, -Math.log(1 - random.next()) * context.faultEveryMs);
    await sleep(Math.max(0, Math.min(gap, until - Date.now())), undefined, { signal });
    if (Date.now() >= until) break;

    if (restartTimes[0] !== undefined && Date.now() >= restartTimes[0]) {
      restartTimes.shift();
      const newPort = figures.openfgaRestarts % 2 === 0;
      const outageMs = random.int(200, 1_500);
      const upstream = await openfga.restart({ newPort, outageMs });
      fleet.retarget(upstream);
      figures.openfgaRestarts += 1;
      if (newPort) figures.openfgaRestartsOnNewPort += 1;
      log(`OpenFGA restarted after ${outageMs} ms down, on ${newPort ? 'a new' : 'the same'} port ${upstream.port}`);
      continue;
    }

    const fault = draw();
    const candidates = alive();
    // Keep one drainer running to overtake the one a fault hits.
    if (fault === undefined || candidates.length < 2) continue;
    const drainer = random.pick(candidates);
    if (fault === 'kill') {
      await fleet.kill(drainer);
      figures.kills += 1;
    } else if (fault === 'terminate') {
      const ended = await fleet.terminateBackends(drainer, random.chance(0.3) ? undefined : 1);
      figures.terminations += 1;
      figures.backendsTerminated += ended;
    } else if (fault === 'slow-answer') {
      const proxy = fleet.slots[drainer]?.proxy;
      proxy?.delayResponses(random.int(300, 1_500));
      await sleep(random.int(500, 1_500), undefined, { signal });
      // Half the time the drainer loses its claim while its acknowledgement is on the way.
      if (random.chance(0.5)) {
        figures.terminations += 1;
        figures.backendsTerminated += await fleet.terminateBackends(drainer);
      }
      await sleep(random.int(500, 1_500), undefined, { signal });
      proxy?.delayResponses(0);
      figures.slowAnswers += 1;
    } else {
      const how = random.chance(0.5) ? 'kill' : 'terminate';
      const attempt = await provokeLateWrite(context, drainer, how);
      lateWriteAttempts.push(attempt);
      if (attempt.lostAt !== undefined && how === 'kill') figures.kills += 1;
      if (attempt.backendsTerminated) {
        figures.terminations += 1;
        figures.backendsTerminated += attempt.backendsTerminated;
      }
      if (attempt.outcome === 'late-write')
        log(`late write by drainer ${drainer} (${how}): ${attempt.objects.join(', ')}`);
    }
  }
  return { ...figures, lateWriteAttempts };
}
