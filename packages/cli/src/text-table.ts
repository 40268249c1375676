/** A column of a {@link textTable}: its header, and whether numbers align right. */
export interface TextColumn {
  readonly header: string;
  readonly align?: 'left' | 'right';
}

/**
 * Rows as a plain-text table: a header line, then one line per row, columns padded to the widest
 * cell and two spaces apart. No colours and no box characters, so it pastes into a ticket as is.
 *
 * @example
 * textTable([{ header: 'outbox' }, { header: 'pending', align: 'right' }], [['vpc', '3']]);
 */
export function textTable(columns: readonly TextColumn[], rows: readonly (readonly string[])[]): string {
  const widths = columns.map((c, i) => Math.max(c.header.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    columns
      .map((c, i) => {
        const cell = cells[i] ?? '';
        const width = widths[i] as number;
        return c.align === 'right' ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.header)), ...rows.map(line)].join('\n') + '\n';
}

/** `text` cut to `max` characters, with `…` where it was cut; line breaks shown as spaces. */
export function cut(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}
