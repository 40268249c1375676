import { cpus, loadavg } from 'node:os';
import { summaryTable, type SectionResult, type TargetRow } from './summary.js';

/**
 * `pnpm bench [section]…` (drain, openfga, reconciler, latency, e2e, write-path, tokens, enqueue, memory, compaction, audit, xmin, pgbouncer, scaling): runs the benchmarks against a fresh stock (fsync on) Postgres and a real
 * OpenFGA, and prints markdown for docs/BENCHMARKS.md: the summary of every target the sections
 * measured first, then each section. A section returns its markdown, or that and its summary rows.
 */
const sections: Record<string, () => Promise<string | SectionResult>> = {
  drain: async () => (await import('./drain.js')).benchDrain(),
  openfga: async () => (await import('./openfga.js')).benchOpenFga(),
  e2e: async () => (await import('./end-to-end.js')).benchEndToEnd(),
  'write-path': async () => (await import('./write-path.js')).benchWritePath(),
  tokens: async () => (await import('./tokens.js')).benchTokens(),
  latency: async () => (await import('./latency.js')).benchLatency(),
  reconciler: async () => (await import('./reconciler.js')).benchReconciler(),
  enqueue: async () => (await import('./enqueue.js')).benchEnqueue(),
  memory: async () => (await import('./memory.js')).benchMemory(),
  compaction: async () => (await import('./compaction.js')).benchCompaction(),
  audit: async () => (await import('./audit.js')).benchAudit(),
  xmin: async () => (await import('./pinned-xmin.js')).benchPinnedXmin(),
  pgbouncer: async () => (await import('./through-pgbouncer.js')).benchThroughPgBouncer(),
  scaling: async () => (await import('./scaling.js')).benchScaling(),
};

const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' / ');

async function main(): Promise<void> {
  const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const names = wanted.length > 0 ? wanted : Object.keys(sections);
  for (const name of names)
    if (!sections[name]) throw new Error(`unknown benchmark "${name}" (have: ${Object.keys(sections).join(', ')})`);
  const bodies: string[] = [];
  const targets: TargetRow[] = [];
  const loads: string[] = [`start ${load()}`];
  const started = performance.now();
  for (const name of names) {
    console.error(`[bench] ${name}… (load average ${load()})`);
    const result = await (sections[name] as () => Promise<string | SectionResult>)();
    const { markdown, targets: rows } = typeof result === 'string' ? { markdown: result, targets: [] } : result;
    bodies.push(markdown, '');
    targets.push(...rows);
    loads.push(`after ${name} ${load()}`);
  }
  const minutes = (performance.now() - started) / 60_000;
  // The knobs set for this run, so that its heading says how it was scaled.
  const knobs = Object.entries(process.env)
    .filter(([key]) => key.startsWith('BENCH_'))
    .map(([key, value = '']) => `${key}=${/\s/.test(value) ? `"${value}"` : value} `)
    .join('');
  const command = `${knobs}pnpm bench ${wanted.join(' ')}`.trim();
  console.log(
    [
      `## Run of ${new Date().toISOString().slice(0, 10)} — \`${command}\``,
      '',
      `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.versions.node}; ${minutes.toFixed(1)} min;`,
      `load average (1 / 5 / 15 min): ${loads.join('; ')}.`,
      '',
      summaryTable(targets),
      '',
      ...bodies,
    ].join('\n'),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
