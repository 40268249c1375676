/** The middle value (the upper middle of an even count); NaN for none. */
export const median = (values: readonly number[]): number =>
  values.length === 0 ? NaN : ([...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number);

/** The `p`-quantile (0–1) of `sorted`, by the nearest-rank rule; NaN for none. */
export const percentile = (sorted: readonly number[], p: number): number =>
  sorted.length === 0 ? NaN : (sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number);

/** Ascending copy. */
export const sorted = (values: readonly number[]): number[] => [...values].sort((a, b) => a - b);

/** `value` as `1.23×`. */
export const times = (value: number, digits = 2): string => `${value.toFixed(digits)}×`;

/** A millisecond figure: one decimal under 10 ms, whole above. */
export const ms = (value: number): string => (value < 10 ? value.toFixed(1) : Math.round(value).toString());

/** `n` with thousands separators, rounded. */
export const count = (n: number): string => Math.round(n).toLocaleString('en-US');

/** A positive integer from the environment variable `name`, else `fallback` (a knob to scale a section down). */
export function knob(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0)
    throw new Error(`${name} must be a positive number, got ${JSON.stringify(raw)}`);
  return value;
}

/** Resolves after `milliseconds`. */
export const sleep = (milliseconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, milliseconds));
