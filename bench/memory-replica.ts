import { migrateToLatest, vpcOutbox } from '@outbox/migrations';
import { enqueueMany, type AnyKysely } from '@outbox/outbox';
import { registrationTuples, serviceClient } from '@outbox/service-kit';
import { readyUrl } from '@outbox/service-kit/testing';
import { createDatabase, processStat, startStack } from '@outbox/test-stack';
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { sql } from 'kysely';
import { bundleImageApp } from '../test/deploy/src/image-bundle.js';
import { kysely } from './bench-db.js';
import { memoryNodeFlags, slope } from './memory.js';
import { freshStore } from './openfga-store.js';
import { paceWriters } from './paced-writers.js';
import { count, knob, sleep } from './statistics.js';
import type { SectionResult } from './summary.js';

const REPO = resolve(import.meta.dirname, '..');
const INTENTS_PER_TRANSACTION = 10;
const WRITERS = 8;
const HTTP_CALLERS = 32;
const CALLER = 'alice';
const PROJECT = 'bench';
const MB = 1024 * 1024;

interface Sample {
  /** ms since the load started. */
  readonly at: number;
  readonly rss: number;
}

/** VmRSS and VmHWM (the peak the kernel saw) of `pid`, in bytes; undefined once it is gone. */
function residentOf(pid: number): { rss: number; peak: number } | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  if (!/^VmRSS:/m.test(status)) return undefined; // a zombie
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(status)?.[1]) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

type Replica = ChildProcessByStdio<null, Readable, Readable>;

/**
 * The vpc service as a process of its own, its drainer and reconciler in it (RUN_DRAINER and
 * RUN_RECONCILER default true: the chart's inProcess mode), every other setting its default.
 * Built: the services image's bundle (test/deploy's bundleImageApp, what scripts/build-images.sh
 * copies to /app) through the image's entry script, with node and the base system's tools only;
 * else the service's `pnpm start` (its source through tsx). Node flags as NODE_OPTIONS, as the chart
 * and the compose file pass them. The entry script execs node: the child's pid is the service's.
 */
function spawnReplica(app: string | undefined, env: Record<string, string>): Replica {
  const [command, args, cwd, path] =
    app === undefined
      ? [process.execPath, ['--import', 'tsx', 'src/main.ts'], join(REPO, 'services/vpc'), process.env.PATH ?? '']
      : ['sh', [join(REPO, 'deploy/image/outbox-image'), 'vpc'], '/', `${dirname(process.execPath)}:/usr/bin:/bin`];
  return spawn(command, args, {
    cwd,
    env: { PATH: path, ...(app === undefined ? {} : { OUTBOX_APP_DIR: app }), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** The URL of the replica's `ready at` line; the tail of its output (kept for errors) as `tail()`. */
async function replicaReady(replica: Replica): Promise<{ url: string; tail(): string }> {
  let output = '';
  const keep = (chunk: Buffer) => {
    const text = chunk.toString();
    output = (output + text).slice(-20_000);
    // The audits' outcomes on stderr: what each one read and took, beside the RSS they explain.
    for (const line of text.split('\n'))
      if (line.includes('audit of ')) console.error(`[replica] ${line.slice(0, 600)}`);
  };
  replica.stdout.on('data', keep);
  replica.stderr.on('data', keep);
  return { url: await readyUrl(replica, 'the replica', 60_000, () => output), tail: () => output };
}

/**
 * A service replica's memory (issue 32): the vpc service with its HTTP server, drainer and
 * reconciler in one process, as the image runs it (BENCH_MEMORY_BUILT=1: the image's bundle), Node's
 * defaults unless BENCH_MEMORY_NODE_FLAGS, against Postgres and OpenFGA (postgres datastore).
 * BENCH_MEMORY_RATE intents/s for BENCH_MEMORY_SECONDS: BENCH_MEMORY_HTTP_RATE (50) of them creates
 * through its HTTP API (check, row and intent, write-through: the answer waits for its delivery),
 * the rest rows and their intents committed straight into its tables, 10 a transaction, as a create
 * writes them (the HTTP path does not reach 1,000/s on two cores). Its RSS from /proc every second.
 */
export async function benchReplicaMemory(): Promise<SectionResult> {
  const seconds = knob('BENCH_MEMORY_SECONDS', 120);
  const rate = knob('BENCH_MEMORY_RATE', 1_000);
  const httpRate = Math.min(rate, knob('BENCH_MEMORY_HTTP_RATE', 50));
  const built = process.env.BENCH_MEMORY_BUILT === '1';
  const nodeFlags = memoryNodeFlags();
  // The replica's AUDIT_INTERVAL_MS (0: no audit); unset, the service's default (300000).
  const auditMs = process.env.BENCH_MEMORY_AUDIT_INTERVAL_MS;
  if (auditMs !== undefined && !/^\d+$/.test(auditMs))
    throw new Error(`BENCH_MEMORY_AUDIT_INTERVAL_MS must be milliseconds, got ${JSON.stringify(auditMs)}`);
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-replica-'));
  let db: AnyKysely | undefined;
  let replica: Replica | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_replica');
    db = kysely(url, WRITERS);
    await migrateToLatest(db);
    const token = stack.openfga.presharedKey;
    const store = await freshStore({ apiUrl: stack.openfga.apiUrl, token });
    await store.client.write({
      writes: [{ user: `user:${CALLER}`, relation: 'editor', object: `project:${PROJECT}` }],
    });
    const app = built ? (await bundleImageApp(join(dir, 'app'))).dir : undefined;
    replica = spawnReplica(app, {
      DATABASE_URL: url,
      OPENFGA_API_URL: stack.openfga.apiUrl,
      OPENFGA_STORE_ID: store.storeId,
      ...(token ? { OPENFGA_API_TOKEN: token } : {}),
      PORT: '0',
      // The chart's `env` default.
      LOG_LEVEL: 'info',
      ...(auditMs !== undefined ? { AUDIT_INTERVAL_MS: auditMs } : {}),
      ...(nodeFlags.length > 0 ? { NODE_OPTIONS: nodeFlags.join(' ') } : {}),
    });
    const running = replica;
    const exited = once(running, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
    const { url: serviceUrl, tail } = await replicaReady(running);
    const pid = running.pid as number;
    const cpuAtStart = processStat(pid)?.cpuMs ?? NaN;
    const started = performance.now();
    const samples: Sample[] = [];
    let peak = 0;
    let cpuSeconds = NaN;
    const sample = () => {
      const resident = residentOf(pid);
      if (!resident) return;
      samples.push({ at: performance.now() - started, rss: resident.rss });
      peak = resident.peak;
      cpuSeconds = ((processStat(pid)?.cpuMs ?? NaN) - cpuAtStart) / 1000;
    };
    sample();
    const sampler = setInterval(sample, 1_000);
    // A replica that exits under the load ends the run: the writers stop at their next write.
    let died: string | undefined;
    let stopping = false;
    void exited.then(([code, signal]) => {
      if (stopping) return;
      const fatal = /^.*(FATAL ERROR|out of memory|Killed).*$/m.exec(tail())?.[0];
      died = `exited (${code ?? signal}) after ${Math.round((performance.now() - started) / 1000)} s: ${fatal ?? tail().trim().split('\n').at(-1)}`;
      console.error(`[bench] the replica ${died}\n${tail().slice(-4_000)}`);
    });
    const alive = () => {
      if (died !== undefined) throw new Error(`the replica ${died}`);
    };
    const caller = serviceClient(serviceUrl, CALLER);
    const answers = new Map<number, number>();
    let next = 0;
    const load = await Promise.all([
      paceWriters({
        writers: WRITERS,
        rate: (rate - httpRate) / INTENTS_PER_TRANSACTION,
        seconds,
        write: async () => {
          alive();
          const rows = Array.from({ length: INTENTS_PER_TRANSACTION }, () => {
            const id = randomUUID();
            return { id, name: `d${(next += 1)}`, object: `vpc:${id}` };
          });
          await (db as AnyKysely).transaction().execute(async (trx) => {
            const values = rows.map((r) => sql`(${r.id}, ${PROJECT}, ${r.name}, ${CALLER}, ${'10.0.0.0/16'})`);
            await sql`insert into vpc.vpcs (id, project_id, name, created_by, cidr_block) values ${sql.join(values)}`.execute(
              trx,
            );
            await enqueueMany(
              trx,
              vpcOutbox,
              rows.map((r) => ({
                partitionKey: r.object,
                payload: { writes: registrationTuples(r.object, PROJECT, CALLER) },
              })),
            );
          });
        },
      }),
      httpRate > 0
        ? paceWriters({
            writers: HTTP_CALLERS,
            rate: httpRate,
            seconds,
            write: async (i) => {
              alive();
              const { status } = await caller
                .post('/vpcs', { project_id: PROJECT, name: `h${i}`, cidr_block: '10.0.0.0/16' })
                .catch(() => ({ status: 0 }));
              answers.set(status, (answers.get(status) ?? 0) + 1);
            },
          })
        : { written: 0, seconds },
    ]).catch((error: unknown) => {
      if (died === undefined) throw error;
      return undefined;
    });
    const table = sql.table(`${vpcOutbox.schema}.${vpcOutbox.tableName}`);
    const countOf = async (sent: boolean) =>
      (
        await sql<{
          n: number;
        }>`select count(*)::int as n from ${table} where sent_at is ${sql.raw(sent ? 'not null' : 'null')}`.execute(
          db as AnyKysely,
        )
      ).rows[0]?.n ?? NaN;
    // The replica catches up on what is left; its samples count until it has.
    const deadline = performance.now() + 60_000;
    let pending = await countOf(false);
    while (died === undefined && pending > 0 && performance.now() < deadline) {
      await sleep(1_000);
      pending = await countOf(false);
    }
    clearInterval(sampler);
    sample();
    const loadSeconds = load ? Math.max(load[0].seconds, load[1].seconds) : (samples.at(-1)?.at ?? NaN) / 1000;
    const delivered = await countOf(true);
    const enqueued = await countOf(false).then((left) => left + delivered);
    stopping = died === undefined;
    if (stopping) {
      running.kill('SIGTERM');
      const [code] = await exited;
      if (code !== 0) throw new Error(`the replica exited with ${code} on SIGTERM:\n${tail()}`);
    }
    replica = undefined;
    const http = load?.[1].written ?? [...answers.values()].reduce((a, b) => a + b, 0);
    return report({
      samples,
      peak,
      seconds: loadSeconds,
      enqueued,
      http,
      answers,
      delivered,
      pending,
      died,
      rate,
      httpRate,
      cpuSeconds,
      warmUp: seconds / 5,
      process: [
        built ? "the image's bundle through its entry script" : 'its source through tsx (`pnpm start`)',
        nodeFlags.length > 0 ? `NODE_OPTIONS="${nodeFlags.join(' ')}"` : "Node's defaults",
        ...(auditMs !== undefined ? [auditMs === '0' ? 'no audit' : `AUDIT_INTERVAL_MS=${auditMs}`] : []),
      ].join(', '),
    });
  } finally {
    replica?.kill('SIGKILL');
    await db?.destroy();
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Measured {
  readonly samples: readonly Sample[];
  /** VmHWM at the end: the largest RSS the kernel saw, between samples too. */
  readonly peak: number;
  readonly seconds: number;
  /** Intents committed (straight into the tables and through HTTP), and creates made through HTTP. */
  readonly enqueued: number;
  readonly http: number;
  /** Every HTTP answer by status (0: no answer). */
  readonly answers: ReadonlyMap<number, number>;
  readonly delivered: number;
  /** Intents still pending when the catch-up ended. */
  readonly pending: number;
  /** How the replica ended, when it exited during the run. */
  readonly died: string | undefined;
  readonly rate: number;
  readonly httpRate: number;
  /** The replica's CPU time over the samples (user + system). */
  readonly cpuSeconds: number;
  readonly warmUp: number;
  /** How the replica ran (bundle or source, Node flags). */
  readonly process: string;
}

function report(m: Measured): SectionResult {
  const steady = m.samples.filter((s) => s.at / 1000 >= m.warmUp);
  const mb = (bytes: number | undefined) => ((bytes ?? NaN) / MB).toFixed(0);
  const perMinute = slope(steady.map((s) => ({ x: s.at / 60_000, y: s.rss / MB })));
  const steadyMax = Math.max(...steady.map((s) => s.rss));
  const reached = m.enqueued / m.seconds;
  const statuses = [...m.answers].map(([status, n]) => `${status === 0 ? 'none' : status} ${count(n)}`).join(', ');
  const sampled = (m.samples.at(-1)?.at ?? NaN) / 1000;
  const pending = m.pending > 0 ? `, ${count(m.pending)} still pending` : '';
  const rss = `RSS ${mb(steady[0]?.rss)} MB after the warm-up, ${mb(m.peak)} MB at most, slope ${perMinute.toFixed(1)} MB/min`;
  return {
    markdown: [
      `### A service replica's memory over ${Math.round(m.seconds)} s at ${count(m.rate)} intents/s (vpc: HTTP, drainer, reconciler; ${m.process})`,
      '',
      'The vpc service in a process of its own, every setting not named above its default (LISTEN drainer, reconciler, an audit every 5 min unless named), against',
      `Postgres and OpenFGA (postgres datastore). ${count(m.http)} creates through its HTTP API (${count(m.httpRate)}/s offered; answers: ${statuses || 'none'}),`,
      `the rest rows and their intents committed straight into its tables, ${INTENTS_PER_TRANSACTION} a transaction: ${count(m.enqueued)} intents (${count(reached)}/s reached),`,
      `${count(m.delivered)} delivered by the end${pending}. The replica used ${(m.cpuSeconds / sampled).toFixed(2)} cores meanwhile.`,
      `VmRSS every second (${m.samples.length} samples); the slope by least squares after the first ${Math.round(m.warmUp)} s (warm-up).`,
      ...(m.died ? ['', `**The replica ${m.died}.**`] : []),
      '',
      '| RSS (MB) | at the start | after warm-up | at the end | max after warm-up | peak (VmHWM) | slope (MB/min) |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
      `| replica | ${mb(m.samples[0]?.rss)} | ${mb(steady[0]?.rss)} | ${mb(m.samples.at(-1)?.rss)} | ${mb(steadyMax)} | ${mb(m.peak)} | **${perMinute.toFixed(2)}** |`,
    ].join('\n'),
    targets: [
      {
        target: `service replica (vpc: HTTP, drainer, reconciler) RSS ≤ 150 MB with no growth over 10 min at ~${count(m.rate)} intents/s (issue 32; ${Math.round(m.seconds)} s here; ${m.process})`,
        figure: m.died
          ? `the replica ${m.died}; before it, ${rss}`
          : `${rss} (${count(reached)} intents/s, ${count(m.delivered)} delivered${pending})`,
        // Over 150 MB is no whatever the length; under it, no growth (under 1 MB/min, as the drainer's
        // row) needs the 10 minutes: a shorter run cannot tell.
        met: m.died || m.peak > 150 * MB ? false : m.seconds >= 590 ? perMinute < 1 : undefined,
      },
    ],
  };
}
