/**
 * The model's runs (docs/protocol-model.md) through the quint installed with this package, on its
 * TypeScript backend: the default (Rust) backend downloads an evaluator, which a test must never do.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const QUINT = fileURLToPath(new URL('../node_modules/.bin/quint', import.meta.url));
const SPEC = 'outbox.qnt';

/** The protocol as built, the invariants it must keep, the mutant that must break one. */
export const PROTOCOL_MODULE = 'outbox';
export const INVARIANTS = ['noIntentLost', 'deliveryOrder', 'noRevivalPastSuccessor', 'boundedDisagreement'] as const;
export const MUTANT_MODULE = 'mutantNoRedriveGuard';
export const MUTANT_BREAKS = 'deliveryOrder';
/** Paths the histories should reach: reported, not asserted (a count of 0 says the run is too short). */
export const WITNESSES = [
  'sawLateWrite',
  'sawCorrection',
  'sawRevival',
  'sawRetire',
  'sawDiscard',
  'sawRepair',
] as const;
/** The replays of the spec (`quint test`): the finding, the check, the audit's repair and its limits. */
export const REPLAYS = [
  'lateWriteCorrectedTest',
  'lateWriteOfAPoisonedIntentTest',
  'auditRepairsTheLateWriteTest',
  'poisonedRowHoldsOffTheAuditTest',
  'changelogAuditLosesTheLateWriteTest',
] as const;

/** How long and how wide a simulation explores. Fixed, so that a run is repeatable. */
export interface Exploration {
  readonly seed: number;
  /** Steps in each history. */
  readonly maxSteps: number;
  /** Histories; a violation ends the run early. */
  readonly maxSamples: number;
}

/** The test's (`pnpm model`): about 12 s of CPU for the protocol, 7 s for the mutant, 5 s for the replays. */
export const TEST_EXPLORATION: Exploration = { seed: 42, maxSteps: 30, maxSamples: 300 };
/** `pnpm model:long`: deeper histories, ten times as many (about 70 s of CPU, the protocol's nearly all). */
export const LONG_EXPLORATION: Exploration = { seed: 42, maxSteps: 40, maxSamples: 3_000 };

/** How a quint command ended, and what it printed. */
export interface QuintResult {
  readonly code: number;
  readonly output: string;
  readonly ms: number;
}

function quint(args: readonly string[], timeoutMs: number): Promise<QuintResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      QUINT,
      [...args, '--backend=typescript'],
      { cwd: PACKAGE_DIR, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const ms = Math.round(performance.now() - started);
        const output = `${stdout}${stderr}`;
        // A number is quint's exit code; anything else (ENOENT, the timeout's kill) never got one.
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, output: error && code === -1 ? `${output}\n${error.message}` : output, ms });
      },
    );
  });
}

/** Simulates `module` from its init, checking `invariants` together, reporting the witnesses. */
export function simulate(
  module: string,
  invariants: readonly string[],
  exploration: Exploration,
  timeoutMs: number,
): Promise<QuintResult> {
  return quint(
    [
      'run',
      SPEC,
      `--main=${module}`,
      `--seed=${exploration.seed}`,
      `--max-steps=${exploration.maxSteps}`,
      `--max-samples=${exploration.maxSamples}`,
      '--invariants',
      ...invariants,
      '--witnesses',
      ...WITNESSES,
    ],
    timeoutMs,
  );
}

/** Runs the protocol module's replays. */
export function replay(timeoutMs: number): Promise<QuintResult> {
  return quint(['test', SPEC, `--main=${PROTOCOL_MODULE}`], timeoutMs);
}

/** What a simulation concluded: `ok` (no violation in any history), `violation`, or neither (it failed to run). */
export function verdict(result: QuintResult): 'ok' | 'violation' | 'error' {
  if (result.code === 0 && result.output.includes('[ok] No violation found')) return 'ok';
  if (result.code !== 0 && result.output.includes('[violation] Found an issue')) return 'violation';
  return 'error';
}

/** The replays `quint test` reported passed. */
export function passedReplays(result: QuintResult): string[] {
  return REPLAYS.filter((name) => new RegExp(`ok ${name} passed`).test(result.output));
}
