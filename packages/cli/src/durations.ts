import { InvalidArgumentError, Option } from 'commander';

/**
 * A duration the way an operator reads it: `42s`, `3m12s`, `2h05m`, `3d04h`.
 *
 * @example
 * formatDuration(192); // '3m12s'
 */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3_600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h${pad(Math.floor((s % 3_600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d${pad(Math.floor((s % 86_400) / 3_600))}h`;
}

/** A time relative to `now`: `12s ago`, `in 3m05s`, `now`. */
export function formatRelative(at: Date, now: Date): string {
  const seconds = (at.getTime() - now.getTime()) / 1_000;
  if (Math.abs(seconds) < 1) return 'now';
  return seconds < 0 ? `${formatDuration(-seconds)} ago` : `in ${formatDuration(seconds)}`;
}

const UNIT_MS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000 } as const;
const DURATION = /^(?:(\d{1,6})d)?(?:(\d{1,7})h)?(?:(\d{1,9})m)?(?:(\d{1,11})s)?$/;

/**
 * An option parser for a duration as operators write it — `30d`, `12h`, `1d12h`, `90m`, `45s`, or
 * `0` — in milliseconds, at most `maxMs`; anything else is commander's one-line usage error.
 *
 * @example
 * program.option('--retention <duration>', 'keep rows this long', durationArgument(36_500 * 86_400_000));
 */
export function durationArgument(maxMs: number): (value: string) => number {
  return (value) => {
    const match = value === '' ? null : DURATION.exec(value);
    const ms =
      value === '0'
        ? 0
        : match &&
          (['d', 'h', 'm', 's'] as const).reduce((sum, unit, i) => sum + Number(match[i + 1] ?? 0) * UNIT_MS[unit], 0);
    if (ms === null || ms > maxMs)
      throw new InvalidArgumentError(
        `expected a duration such as 30d, 12h, 1d12h, 90m, 45s or 0, at most ${durationText(maxMs)}.`,
      );
    return ms;
  };
}

/**
 * A duration in the form {@link durationArgument} reads, exact to the second: `30d`, `1d12h`, `0`.
 *
 * @example
 * durationText(36 * 3_600_000); // '1d12h'
 */
export function durationText(ms: number): string {
  let rest = Math.floor(ms / 1_000) * 1_000;
  const parts = (['d', 'h', 'm', 's'] as const).flatMap((unit) => {
    const n = Math.floor(rest / UNIT_MS[unit]);
    rest -= n * UNIT_MS[unit];
    return n > 0 ? [`${n}${unit}`] : [];
  });
  return parts.length === 0 ? '0' : parts.join('');
}

/**
 * A duration option (`--retention <duration>`): read by {@link durationArgument}, its default (in
 * milliseconds) shown in `--help` the way it is written (`30d`, not `2592000000`).
 *
 * @example
 * command.addOption(durationOption('--retention <duration>', 'keep delivered rows this long', MAX_MS, 30 * DAY_MS));
 */
export function durationOption(flags: string, description: string, maxMs: number, defaultMs?: number): Option {
  const option = new Option(flags, description).argParser(durationArgument(maxMs));
  return defaultMs === undefined ? option : option.default(defaultMs, durationText(defaultMs));
}
