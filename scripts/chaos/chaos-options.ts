import { parseArgs } from 'node:util';

/** The faults a run can inject (all by default). */
export const FAULTS = ['late-write', 'kill', 'terminate', 'restart', 'slow-answer'] as const;
export type Fault = (typeof FAULTS)[number];

/** What one chaos run does; every field has a flag and an environment variable (the flag wins). */
export interface ChaosOptions {
  /** Seconds of workload and faults. Default 60 (`--short`: 25): long enough for a few OpenFGA restarts and dozens of kills. */
  readonly durationS: number;
  /**
   * Seconds to wait once everything is delivered, before the checks. Default 60 (`--short`: 20, past the late-write check's default 14 s): the
   * horizon H after which a partition's keys must equal its last delivered intent (docs/design.md §9).
   */
  readonly settleS: number;
  /** Resource ids the workload registers and deregisters. Default 400 (`--short`: 200). */
  readonly partitions: number;
  /** Drainer processes, each behind its own delaying proxy. Default 3: one to hold, two to overtake it. */
  readonly drainers: number;
  /** Register/deregister episodes in flight at once. Default 12: a few hundred intents a second on 2 cores. */
  readonly concurrency: number;
  /** Milliseconds a late-write provocation holds a Write. Default 3000: well past a kill and a redelivery (~0.3 s). */
  readonly holdMs: number;
  /** Mean milliseconds between the end of a fault and the start of the next. Default 1000. */
  readonly faultEveryMs: number;
  /** Which faults to inject. Default all of {@link FAULTS}. */
  readonly faults: readonly Fault[];
  /** Seed of the fault schedule and workload choices. Default: random (printed, so a run can be repeated). */
  readonly seed: number;
  /** Print the result as one JSON object instead of the table. */
  readonly json: boolean;
  readonly short: boolean;
}

/** A command line or environment the run cannot use; the message says what was wrong. */
export class ChaosOptionsError extends Error {
  override readonly name = 'ChaosOptionsError';
}

const NUMBERS = {
  duration: {
    env: 'CHAOS_DURATION_S',
    field: 'durationS',
    long: 60,
    short: 25,
    min: 1,
    help: 'seconds of workload and faults',
  },
  settle: {
    env: 'CHAOS_SETTLE_S',
    field: 'settleS',
    long: 60,
    short: 20,
    min: 0,
    help: 'seconds to wait after the drain, before the checks (past the late-write check: H)',
  },
  partitions: {
    env: 'CHAOS_PARTITIONS',
    field: 'partitions',
    long: 400,
    short: 200,
    min: 1,
    help: 'resource ids of the workload',
  },
  drainers: {
    env: 'CHAOS_DRAINERS',
    field: 'drainers',
    long: 3,
    short: 3,
    min: 2,
    help: 'drainer processes (at least 2: one is held, another overtakes it)',
  },
  concurrency: {
    env: 'CHAOS_CONCURRENCY',
    field: 'concurrency',
    long: 12,
    short: 12,
    min: 1,
    help: 'workload episodes in flight',
  },
  'hold-ms': {
    env: 'CHAOS_HOLD_MS',
    field: 'holdMs',
    long: 3_000,
    short: 3_000,
    min: 100,
    help: 'how long a late-write provocation holds a Write',
  },
  'fault-every-ms': {
    env: 'CHAOS_FAULT_EVERY_MS',
    field: 'faultEveryMs',
    long: 1_000,
    short: 1_000,
    min: 100,
    help: 'mean gap between faults',
  },
  seed: {
    env: 'CHAOS_SEED',
    field: 'seed',
    long: undefined,
    short: undefined,
    min: 0,
    help: 'seed of the fault schedule (default random)',
  },
} as const;

export const CHAOS_HELP = `pnpm chaos [options]: a fault run against a real Postgres and OpenFGA (started for the run).

A workload registers and deregisters vpc resources (row + outbox intent in one transaction) while
drainer processes deliver them through delaying proxies and faults hit them. Then it drains, waits the
settle period and checks: no intent lost, no partition out of order, OpenFGA equal to the owner table.
Exit code 0 when all three hold, 1 otherwise (or when the run itself failed).

  --short                 the CI-sized run (${NUMBERS.duration.short} s of faults, ${NUMBERS.settle.short} s settle, ${NUMBERS.partitions.short} partitions)
${Object.entries(NUMBERS)
  .map(
    ([flag, o]) =>
      `  --${`${flag} <n>`.padEnd(22)}${o.help}${o.long === undefined ? '' : ` (default ${o.long})`}  [${o.env}]`,
  )
  .join('\n')}
  --faults <list>         comma-separated, of ${FAULTS.join(', ')} (default all)  [CHAOS_FAULTS]
  --json                  print the result as one JSON object
  --help                  this text`;

function readInteger(flag: string, env: string, raw: string | undefined, min: number): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min)
    throw new ChaosOptionsError(`--${flag} (${env}): expected an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

function readFaults(raw: string | undefined): readonly Fault[] {
  if (raw === undefined || raw.trim() === '') return FAULTS;
  const faults = raw
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f !== '');
  const unknown = faults.filter((f) => !(FAULTS as readonly string[]).includes(f));
  if (unknown.length > 0)
    throw new ChaosOptionsError(`--faults: unknown ${unknown.join(', ')}; expected some of ${FAULTS.join(', ')}`);
  return faults as Fault[];
}

/**
 * Reads the options from `argv` (flags) and `env`; returns `'help'` for `--help`.
 *
 * @example
 * const options = parseChaosOptions(process.argv.slice(2), process.env);
 */
export function parseChaosOptions(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): ChaosOptions | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      strict: true,
      options: {
        ...Object.fromEntries(Object.keys(NUMBERS).map((flag) => [flag, { type: 'string' as const }])),
        faults: { type: 'string' },
        short: { type: 'boolean' },
        json: { type: 'boolean' },
        help: { type: 'boolean' },
      },
    });
  } catch (error) {
    throw new ChaosOptionsError(`${error instanceof Error ? error.message : String(error)} (see --help)`, {
      cause: error,
    });
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (values.help) return 'help';
  const short = values.short === true;
  const numbers: Record<string, number> = {};
  for (const [flag, o] of Object.entries(NUMBERS)) {
    const given =
      readInteger(flag, o.env, values[flag] as string | undefined, o.min) ??
      readInteger(flag, o.env, env[o.env], o.min);
    numbers[o.field] = given ?? (short ? o.short : o.long) ?? Math.floor(Math.random() * 2 ** 31);
  }
  return {
    ...(numbers as Pick<
      ChaosOptions,
      'durationS' | 'settleS' | 'partitions' | 'drainers' | 'concurrency' | 'holdMs' | 'faultEveryMs' | 'seed'
    >),
    faults: readFaults((values.faults as string | undefined) ?? env.CHAOS_FAULTS),
    json: values.json === true,
    short,
  };
}
