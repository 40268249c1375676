import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** docs/metrics.md, the table of every instrument the libraries emit. */
export const METRICS_DOC = join(import.meta.dirname, '..', '..', '..', 'docs', 'metrics.md');

/** One row of the instrument table in docs/metrics.md. */
export interface DocumentedInstrument {
  /** The OpenTelemetry name, e.g. `outbox.drainer.delivered`. */
  readonly name: string;
  /** As the Prometheus exporter renders it, e.g. `outbox_drainer_delivered_total`. */
  readonly prometheus: string;
  /** `counter`, `gauge` or `histogram`. */
  readonly kind: string;
  /** The UCUM unit, e.g. `s` or `{intent}`. */
  readonly unit: string;
  /** The attributes' OpenTelemetry names. */
  readonly attributes: readonly string[];
}

const HEADER = '| Instrument | Prometheus | Kind | Unit | Attributes | Meaning |';
const code = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

/** The rows of the instrument table in `markdown` (docs/metrics.md by default). */
export function documentedInstruments(markdown = readFileSync(METRICS_DOC, 'utf8')): DocumentedInstrument[] {
  const lines = markdown.split('\n');
  const start = lines.indexOf(HEADER);
  if (start < 0) throw new Error(`no instrument table (header ${HEADER}) in the markdown`);
  const rows: DocumentedInstrument[] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line
      .split(/(?<!\\)\|/)
      .slice(1, -1)
      .map((c) => c.trim());
    const [name, prometheus, kind, unit, attributes] = cells.map(code);
    if (name?.length !== 1 || prometheus?.length !== 1 || kind?.length !== 1 || unit?.length !== 1)
      throw new Error(`malformed instrument row: ${line}`);
    rows.push({
      name: name[0] as string,
      prometheus: prometheus[0] as string,
      kind: kind[0] as string,
      unit: unit[0] as string,
      attributes: attributes ?? [],
    });
  }
  return rows;
}
