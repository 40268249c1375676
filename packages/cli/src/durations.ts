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
