/** One sample line of a Prometheus text exposition. */
export interface PrometheusSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** A metric family's metadata: its `# TYPE`, `# UNIT` and `# HELP` lines. */
export interface PrometheusFamily {
  readonly type: string;
  readonly unit: string | undefined;
  readonly help: string | undefined;
}

/** A parsed scrape. */
export interface PrometheusScrape {
  readonly families: ReadonlyMap<string, PrometheusFamily>;
  readonly samples: readonly PrometheusSample[];
  /** The value of the one sample of `name` whose labels include `labels`; undefined when none does, an error when several do. */
  value(name: string, labels?: Readonly<Record<string, string>>): number | undefined;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
const unescape = (value: string) => value.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
const number = (text: string) => (text === '+Inf' ? Infinity : text === '-Inf' ? -Infinity : Number(text));

/**
 * Parses the text exposition format (version 0.0.4, with OpenMetrics' `# UNIT` lines as the
 * OpenTelemetry exporter writes them).
 * @example
 * const scrape = parsePrometheusText(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
 * expect(scrape.value('outbox_drainer_delivered_total', { outbox_table: 'vpc.fga_register_outbox' })).toBe(3);
 */
export function parsePrometheusText(text: string): PrometheusScrape {
  const meta = new Map<string, { type?: string; unit?: string; help?: string }>();
  const samples: PrometheusSample[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const comment = /^# (HELP|TYPE|UNIT) (\S+) ?(.*)$/.exec(line);
    if (comment) {
      const [, keyword, name, rest] = comment as unknown as [string, 'HELP' | 'TYPE' | 'UNIT', string, string];
      const entry = meta.get(name) ?? {};
      entry[keyword.toLowerCase() as 'help' | 'type' | 'unit'] = rest;
      meta.set(name, entry);
      continue;
    }
    if (line.startsWith('#')) continue;
    const sample = SAMPLE.exec(line);
    if (!sample) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (sample[2] ?? '').matchAll(LABEL)) labels[key as string] = unescape(value as string);
    samples.push({ name: sample[1] as string, labels, value: number(sample[3] as string) });
  }
  const families = new Map<string, PrometheusFamily>();
  for (const [name, entry] of meta) {
    if (entry.type === undefined) throw new Error(`${name} has no # TYPE line`);
    families.set(name, { type: entry.type, unit: entry.unit, help: entry.help });
  }
  return {
    families,
    samples,
    value(name, labels = {}) {
      const found = samples.filter(
        (s) => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value),
      );
      if (found.length > 1)
        throw new Error(`${found.length} samples of ${name} have the labels ${JSON.stringify(labels)}`);
      return found[0]?.value;
    },
  };
}
