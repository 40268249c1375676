import { cpus } from 'node:os';

/**
 * `pnpm bench [drain|openfga|reconciler|latency|compaction]…`: runs the benchmarks against a fresh stock (fsync on)
 * Postgres and a real OpenFGA, and prints markdown for docs/BENCHMARKS.md.
 */
const sections: Record<string, () => Promise<string>> = {
  drain: async () => (await import('./drain.js')).benchDrain(),
  openfga: async () => (await import('./openfga.js')).benchOpenFga(),
  reconciler: async () => (await import('./reconciler.js')).benchReconciler(),
  latency: async () => (await import('./latency.js')).benchLatency(),
  compaction: async () => (await import('./compaction.js')).benchCompaction(),
};

async function main(): Promise<void> {
  const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const names = wanted.length > 0 ? wanted : Object.keys(sections);
  for (const name of names) if (!sections[name]) throw new Error(`unknown benchmark "${name}" (have: ${Object.keys(sections).join(', ')})`);
  const out: string[] = [
    `## Run of ${new Date().toISOString().slice(0, 10)} — \`pnpm bench ${wanted.join(' ')}\``.trimEnd(),
    '',
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.versions.node}.`,
    '',
  ];
  for (const name of names) {
    console.error(`[bench] ${name}…`);
    out.push(await (sections[name] as () => Promise<string>)(), '');
  }
  console.log(out.join('\n'));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
