import { createOutboxTable, defineOutbox, enqueueMany, type AnyKysely } from '@outbox/outbox';
import { createDatabase, startStack } from '@outbox/test-stack';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { kysely } from './bench-db.js';
import { heapGroups, type HeapGroup } from './heap-snapshot.js';
import type { MemoryDrainerCommand, MemoryDrainerConfig, MemoryDrainerMessage } from './memory-drainer.js';
import { freshStore } from './openfga-store.js';
import { paceWriters } from './paced-writers.js';
import { count, knob, sleep } from './statistics.js';
import type { SectionResult } from './summary.js';

const INTENTS_PER_TRANSACTION = 10;
const PARTITIONS = 1_000;
const WRITERS = 8;
const MB = 1024 * 1024;

type Sample = Extract<MemoryDrainerMessage, { type: 'sample' }>;

/** Least-squares slope of `y` over `x`. */
export function slope(points: ReadonlyArray<{ x: number; y: number }>): number {
  const n = points.length;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  return sxx === 0 ? NaN : sxy / sxx;
}

/** The next message of `type` from `child`, or a rejection after `ms`. */
async function next<T extends MemoryDrainerMessage['type']>(
  child: ChildProcess,
  type: T,
  ms = 60_000,
): Promise<Extract<MemoryDrainerMessage, { type: T }>> {
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`memory drainer: no ${type} after ${ms} ms`)), ms);
    const listener = (message: MemoryDrainerMessage) => {
      if (message.type !== type) return;
      clearTimeout(timer);
      child.off('message', listener);
      resolvePromise(message as Extract<MemoryDrainerMessage, { type: T }>);
    };
    child.on('message', listener);
  });
}

const command = (child: ChildProcess, message: MemoryDrainerCommand) => child.send(message);

/** BENCH_MEMORY_NODE_FLAGS: Node/V8 flags, space-separated, each `--flag` or `--flag=value`. */
export function memoryNodeFlags(): string[] {
  const nodeFlags = (process.env.BENCH_MEMORY_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const bad = nodeFlags.find((flag) => !/^--[a-z0-9-]+(=\S+)?$/.test(flag));
  if (bad !== undefined)
    throw new Error(`BENCH_MEMORY_NODE_FLAGS: ${JSON.stringify(bad)} is not a --flag or --flag=value`);
  return nodeFlags;
}

/**
 * How the drainer process runs: BENCH_MEMORY_BUILT=1 loads the built packages (dist/, as a service
 * installs them; `pnpm build` first) instead of their source through tsx; BENCH_MEMORY_NODE_FLAGS
 * (space-separated, each starting with --) are Node/V8 flags for it, e.g. `--max-old-space-size=96`.
 */
function drainerProcess(): { built: boolean; nodeFlags: string[]; label: string } {
  const built = process.env.BENCH_MEMORY_BUILT === '1';
  const nodeFlags = memoryNodeFlags();
  if (built && !existsSync(resolve(import.meta.dirname, '../packages/drainer/dist/index.js'))) {
    throw new Error('BENCH_MEMORY_BUILT=1 needs the built packages: run pnpm build first');
  }
  const label = [
    built ? 'built packages (dist/)' : 'packages from source through tsx',
    ...(nodeFlags.length > 0 ? [`node ${nodeFlags.join(' ')}`] : []),
  ].join(', ');
  return { built, nodeFlags, label };
}

/**
 * A drainer process's memory over a sustained load (issue 23): one drainer (defaults, LISTEN, the
 * OpenFGA sink into OpenFGA on the postgres datastore) in a process of its own while writers here
 * commit BENCH_MEMORY_RATE (1,000) intents/s, 10 a transaction, for BENCH_MEMORY_SECONDS (120; the
 * issue asks for 10 minutes). Its `process.memoryUsage()` and V8 heap spaces every second, the slope
 * of each after the first fifth (warm-up), and a heap snapshot at the end grouped by constructor.
 * BENCH_MEMORY_TARGET=replica measures a whole service replica instead (memory-replica.ts).
 */
export async function benchMemory(): Promise<SectionResult> {
  const target = process.env.BENCH_MEMORY_TARGET ?? 'drainer';
  if (target === 'replica') return (await import('./memory-replica.js')).benchReplicaMemory();
  if (target !== 'drainer')
    throw new Error(`BENCH_MEMORY_TARGET must be drainer or replica, got ${JSON.stringify(target)}`);
  const seconds = knob('BENCH_MEMORY_SECONDS', 120);
  const rate = knob('BENCH_MEMORY_RATE', 1_000);
  const drainerRun = drainerProcess();
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-memory-'));
  let db: AnyKysely | undefined;
  let child: ChildProcess | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_memory');
    db = kysely(url, WRITERS);
    const spec = defineOutbox({ table: 'bench.memory', partitionColumn: 'resource_id' });
    await createOutboxTable(db, spec);
    const target = { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey };
    const store = await freshStore(target);
    const config: MemoryDrainerConfig = {
      databaseUrl: url,
      table: spec.table,
      apiUrl: target.apiUrl,
      storeId: store.storeId,
      token: target.token,
    };
    child = spawn(
      process.execPath,
      [
        ...drainerRun.nodeFlags,
        '--expose-gc',
        '--import',
        'tsx',
        resolve(import.meta.dirname, 'memory-drainer.ts'),
        JSON.stringify(config),
      ],
      {
        cwd: resolve(import.meta.dirname, '..'),
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        env: drainerRun.built
          ? { ...process.env, TSX_TSCONFIG_PATH: resolve(import.meta.dirname, 'tsconfig.built.json') }
          : process.env,
      },
    );
    const running = child;
    const samples: Sample[] = [];
    running.on('message', (message: MemoryDrainerMessage) => {
      if (message.type === 'sample') samples.push(message);
    });
    await next(running, 'ready');
    const warmUp = seconds / 5;
    const liveAt = async () => {
      command(running, { type: 'gc' });
      return (await next(running, 'gc')).heapUsed;
    };
    const early = sleep(warmUp * 1000).then(liveAt);
    const written = await paceWriters({
      writers: WRITERS,
      rate: rate / INTENTS_PER_TRANSACTION,
      seconds,
      write: async (t) => {
        const intents = Array.from({ length: INTENTS_PER_TRANSACTION }, (_, j) => {
          const i = t * INTENTS_PER_TRANSACTION + j;
          const object = `vpc:m-${i % PARTITIONS}`;
          return { partitionKey: object, payload: { writes: [{ user: `user:m-${i}`, relation: 'viewer', object }] } };
        });
        await (db as AnyKysely).transaction().execute((trx) => enqueueMany(trx, spec, intents));
      },
    });
    const enqueued = written.written * INTENTS_PER_TRANSACTION;
    // The drainer catches up on what is left, then the heap snapshot (after the last sample that counts).
    const deadline = performance.now() + 60_000;
    while ((samples.at(-1)?.delivered ?? 0) < enqueued && performance.now() < deadline) await sleep(200);
    const delivered = samples.at(-1)?.delivered ?? 0;
    const measured = [...samples];
    const live = { early: await early, late: await liveAt() };
    command(running, { type: 'snapshot', path: join(dir, 'end.heapsnapshot') });
    const snapshot = (await next(running, 'snapshot')).path;
    command(running, { type: 'stop' });
    await next(running, 'stopped');
    await once(running, 'exit');
    child = undefined;
    return report({
      samples: measured,
      seconds: written.seconds,
      enqueued,
      delivered,
      rate,
      snapshot,
      warmUp,
      live,
      process: drainerRun.label,
    });
  } finally {
    child?.kill('SIGKILL');
    await db?.destroy();
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Measured {
  readonly samples: readonly Sample[];
  readonly seconds: number;
  readonly enqueued: number;
  readonly delivered: number;
  readonly rate: number;
  readonly snapshot: string;
  readonly warmUp: number;
  /** Heap used right after a full collection, at the end of the warm-up and at the end. */
  readonly live: { readonly early: number; readonly late: number };
  /** How the drainer process ran (source or built, Node flags). */
  readonly process: string;
}

function report(m: Measured): SectionResult {
  const first = m.samples[0]?.at ?? 0;
  const steady = m.samples.filter((s) => (s.at - first) / 1000 >= m.warmUp);
  const parts = ['rss', 'heapTotal', 'heapUsed', 'external', 'arrayBuffers'] as const;
  const perMinute = (part: (typeof parts)[number]) =>
    slope(steady.map((s) => ({ x: (s.at - first) / 60_000, y: s.memory[part] / MB })));
  const at = (s: Sample | undefined, part: (typeof parts)[number]) => ((s?.memory[part] ?? NaN) / MB).toFixed(1);
  const rows = parts.map(
    (part) =>
      `| ${part} | ${at(steady[0], part)} | ${at(m.samples.at(-1), part)} | ${Math.max(...m.samples.map((s) => s.memory[part] / MB)).toFixed(1)} | **${perMinute(part).toFixed(2)}** |`,
  );
  const groups = [...heapGroups(m.snapshot).values()].sort((a, b) => b.bytes - a.bytes);
  const heapBytes = groups.reduce((sum, g) => sum + g.bytes, 0);
  const groupRow = (g: HeapGroup) =>
    `| ${g.kind.replaceAll('|', '\\|')} | ${count(g.count)} | ${(g.bytes / MB).toFixed(2)} | ${Math.round((100 * g.bytes) / heapBytes)} % |`;
  const spaceNames = Object.keys(steady[0]?.spaces ?? {}).filter((name) =>
    m.samples.some((s) => (s.spaces[name] ?? 0) > 0),
  );
  const spaceRow = (name: string) => {
    const mb = (s: Sample | undefined) => ((s?.spaces[name] ?? NaN) / MB).toFixed(2);
    const perMin = slope(steady.map((s) => ({ x: (s.at - first) / 60_000, y: (s.spaces[name] ?? 0) / MB })));
    return `| ${name} | ${mb(steady[0])} | ${mb(m.samples.at(-1))} | ${perMin.toFixed(3)} |`;
  };
  const rssSlope = perMinute('rss');
  const steadyRss = Math.max(...steady.map((s) => s.memory.rss / MB));
  const liveGrowth = (m.live.late - m.live.early) / MB;
  // Less than 2 MB more: what heapUsed gained meanwhile was garbage; more is what the next run should chase.
  const liveVerdict =
    liveGrowth < 2
      ? 'The live set held: what `heapUsed` gained in between was garbage not yet collected (V8 lets the old space grow before a full collection), and the RSS follows the heap V8 reserved.'
      : `The live set grew by ${liveGrowth.toFixed(1)} MB: retained memory, a leak candidate (the snapshot below says of what).`;
  const heapSlope = perMinute('heapUsed');
  return {
    markdown: [
      `### A drainer process's memory over ${Math.round(m.seconds)} s at ${count(m.rate)} intents/s (OpenFGA sink, LISTEN, defaults; ${m.process})`,
      '',
      `One drainer in a process of its own; writers in the bench process commit ${INTENTS_PER_TRANSACTION} intents a transaction over ${count(PARTITIONS)}`,
      `partitions: ${count(m.enqueued)} enqueued (${count(m.enqueued / m.seconds)}/s reached), ${count(m.delivered)} delivered by the end.`,
      `\`process.memoryUsage()\` every second (${m.samples.length} samples); slopes by least squares after the first ${Math.round(m.warmUp)} s (warm-up).`,
      '',
      '| part | after warm-up (MB) | at the end (MB) | max (MB) | slope (MB/min) |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...rows,
      '',
      `Live heap (heap used right after a full collection, forced twice a run): **${(m.live.early / MB).toFixed(1)} MB** after the warm-up, ` +
        `**${(m.live.late / MB).toFixed(1)} MB** at the end. ${liveVerdict}`,
      '',
      'The V8 heap by space (used bytes, MB; slope in MB/min over the same samples):',
      '',
      '| space | after warm-up | at the end | slope |',
      '| --- | ---: | ---: | ---: |',
      ...spaceNames.map(spaceRow),
      '',
      `A heap snapshot at the end (after the last sample; it collects garbage first): ${(heapBytes / MB).toFixed(1)} MB of live nodes, the largest groups`,
      'by type and constructor (self sizes):',
      '',
      '| kind | count | MB | share |',
      '| --- | ---: | ---: | ---: |',
      ...groups.slice(0, 10).map(groupRow),
    ].join('\n'),
    targets: [
      {
        target: `drainer process RSS ≤ 120 MB with no growth trend over 10 min at ~${count(m.rate)} intents/s (${Math.round(m.seconds)} s here; ${m.process})`,
        figure:
          `RSS ${steadyRss.toFixed(0)} MB at most after the warm-up, slope ${rssSlope.toFixed(1)} MB/min; heap used ${heapSlope.toFixed(1)} MB/min; live heap after a full GC ` +
          `${(m.live.early / MB).toFixed(1)} → ${(m.live.late / MB).toFixed(1)} MB (${count(m.delivered)} delivered)`,
        // "No growth trend": under 1 MB/min, the noise of a steady run's slope here. A shorter run cannot tell.
        met: m.seconds >= 590 ? steadyRss <= 120 && rssSlope < 1 : undefined,
      },
    ],
  };
}
