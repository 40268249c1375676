/** One target of the issues, with the figure a run measured and whether it meets it. */
export interface TargetRow {
  /** The target as the issue states it, e.g. `ordered drainer ÷ pg-boss key_strict_fifo ≥ 10×`. */
  readonly target: string;
  /** What this run measured, with its unit or ratio. */
  readonly figure: string;
  /** Met or not; null for a figure reported without a target; undefined when this run could not tell. */
  readonly met: boolean | null | undefined;
}

/** What a section of `pnpm bench` returns: its markdown, and its rows for the summary table. */
export interface SectionResult {
  readonly markdown: string;
  readonly targets: readonly TargetRow[];
}

/** A row whose figure is the ratio `value`, met when it is at least `atLeast` (or at most `atMost`); `detail` follows it in parentheses. */
export function ratioTarget(
  target: string,
  value: number,
  bound: { atLeast: number } | { atMost: number },
  detail = '',
): TargetRow {
  const met = Number.isFinite(value)
    ? 'atLeast' in bound
      ? value >= bound.atLeast
      : value <= bound.atMost
    : undefined;
  return { target, figure: `${Number.isFinite(value) ? value.toFixed(2) : '—'}×${detail ? ` (${detail})` : ''}`, met };
}

/** The summary table that opens docs/BENCHMARKS.md. */
export function summaryTable(rows: readonly TargetRow[]): string {
  const met = (row: TargetRow) =>
    row.met === null ? '(no target)' : row.met === undefined ? 'not measured' : row.met ? '**yes**' : '**no**';
  return [
    '| target | this run | met? |',
    '| --- | --- | --- |',
    ...rows.map((row) => `| ${row.target} | ${row.figure} | ${met(row)} |`),
  ].join('\n');
}
