import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { serviceClient } from '@outbox/service-kit';
import { serviceEnv } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { CHART } from './helm.js';
import { bundleImageApp, imageEntries, REPO, type ImageApp } from './image-bundle.js';

// What the services image holds (/app), made as scripts/build-images.sh makes it, and run through
// the image's own entry script (deploy/image/outbox-image) outside the workspace, with node and a
// shell only: then the commands the chart runs, against this file's database and OpenFGA store.
const ENTRY = join(REPO, 'deploy/image/outbox-image');
const OUTBOX_CONFIG = join(CHART, 'files/outbox.config.json');
const values = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as {
  nodeOptions: string;
  serviceDefaults: { resources: { requests: { memory: string } } };
};

const t = useTestDatabase();
const fga = useOpenFgaStore();
let work: string;
let app: ImageApp;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'outbox-image-'));
  app = await bundleImageApp(join(work, 'app'));
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'editor', object: 'project:smoke' }] });
});
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

/** The environment of a container of the image: node and the base system's tools, nothing of the workspace. */
function imageEnv(env: Record<string, string>): Record<string, string> {
  return { PATH: `${dirname(process.execPath)}:/usr/bin:/bin`, OUTBOX_APP_DIR: app.dir, ...env };
}

/** `outbox-image <args>` to its end, from `/` (no node_modules above it). */
async function run(args: readonly string[], env: Record<string, string> = {}) {
  const child = spawn('sh', [ENTRY, ...args], { cwd: '/', env: imageEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, output };
}

/** Resident memory of process `pid`, in bytes. */
function rss(pid: number): number {
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) * 1024;
}
const MEBI = 1024 * 1024;

describe('the services image’s bundle', () => {
  test('every entry is a plain .mjs with its files beside it: no node_modules, no tsx', () => {
    expect(app.entries).toEqual(Object.keys(imageEntries()));
    expect(readFileSync(join(app.dir, 'entries'), 'utf8').trim().split('\n')).toEqual(app.entries);
    for (const entry of app.entries) expect(existsSync(join(app.dir, 'dist', `${entry}.mjs`))).toBe(true);
    // The SQL the outbox's functions are made of, and the authorization model pnpm migrate writes.
    expect(app.assets).toContain('fga/model.fga');
    expect(app.assets.filter((a) => a.startsWith('dist/sql/')).length).toBeGreaterThan(0);
    expect(readdirSync(app.dir).sort()).toEqual(['dist', 'entries', 'fga']);
  });

  test('the entry script runs each entry by name and refuses other names', async () => {
    const help = await run(['--help']);
    expect(help.code).toBe(0);
    expect(help.output).toContain('entries: iam iam-drain vpc');
    const unknown = await run(['chunk-x']);
    expect(unknown.code).toBe(2);
    expect(unknown.output).toContain('no entry named "chunk-x"');

    const cli = await run(['outbox', '--help']);
    expect(cli.code, cli.output).toBe(0);
    expect(cli.output).toContain('Usage: outbox');
    const migrate = await run(['migrate', '--help']);
    expect(migrate.code, migrate.output).toBe(0);
    expect(migrate.output).toContain('Usage: migrate');
    // Started against nothing, a service and a drain pass stop at their configuration.
    const vpc = await run(['vpc']);
    expect(vpc.code).toBe(1);
    expect(vpc.output).toContain('could not start: DATABASE_URL');
    const drain = await run(['vpc-drain']);
    expect(drain.code).toBe(2);
    expect(drain.output).toContain('DATABASE_URL is not set');
  });

  test('the chart’s commands work from the bundle: migrate, a service without drainer or reconciler, a drain pass, a redrive pass', async () => {
    const env = serviceEnv(t, fga);
    const idsDir = join(work, 'ids');
    mkdirSync(idsDir);
    const idsFile = join(idsDir, 'ids.env');

    // The migrate Job (here with the compose file's ids file, which the entry script fills).
    const migrate = await run(['migrate'], { ...env, OUTBOX_IDS_FILE: idsFile });
    expect(migrate.code, migrate.output).toBe(0);
    expect(migrate.output).toContain(`export OPENFGA_STORE_ID=${env.OPENFGA_STORE_ID}`);
    expect(readFileSync(idsFile, 'utf8')).toMatch(
      new RegExp(`^OPENFGA_STORE_ID=${env.OPENFGA_STORE_ID}\nOPENFGA_MODEL_ID=[0-9A-Z]{26}\n$`),
    );
    expect(readdirSync(idsDir)).toEqual(['ids.env']);

    // The timer variant's Deployment: no drainer, no reconciler; the store id from the ids file.
    const { OPENFGA_STORE_ID: _fromFile, OPENFGA_MODEL_ID: _too, ...rest } = env;
    const child = spawn('sh', [ENTRY, 'vpc'], {
      cwd: '/',
      env: imageEnv({
        ...rest,
        OUTBOX_IDS_FILE: idsFile,
        PORT: '0',
        RUN_DRAINER: 'false',
        RUN_RECONCILER: 'false',
        // So that the write leaves its intent to the drain pass (with flush on write, the answer
        // would deliver it first).
        FLUSH_ON_WRITE: 'false',
        NODE_OPTIONS: values.nodeOptions,
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = once(child, 'exit').then(([code]) => code as number | null);
    let stopped: number | null = null;
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`vpc did not get ready:\n${output}`)), 20_000);
        child.stdout.on('data', () => {
          const match = /ready at (http:\/\/[^\s"]+)/.exec(output);
          if (match?.[1]) {
            clearTimeout(timer);
            resolve(match[1]);
          }
        });
        void exited.then((code) => {
          clearTimeout(timer);
          reject(new Error(`vpc exited with ${code}:\n${output}`));
        });
      });
      expect(output).toContain('"drainer":false');
      expect(output).toContain('"reconciler":false');
      expect((await fetch(new URL('/healthz', url))).status).toBe(200);
      expect((await fetch(new URL('/readyz', url))).status).toBe(200);

      const created = await serviceClient(url, 'alice').post<{ id: string }>('/vpcs', {
        project_id: 'smoke',
        name: 'timed',
        cidr_block: '10.3.0.0/16',
      });
      expect(created.status).toBe(202);
      const object = `vpc:${created.body.id}`;

      // The image runs node itself (exec): its pid is the service's. Idle after a write, it keeps
      // well inside the chart's memory request (sized from the drainer measured under load).
      const resident = rss(child.pid as number);
      // Two malloc arenas unless the environment says otherwise: the entry script's default.
      const environ = readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0');
      expect(environ).toContain('MALLOC_ARENA_MAX=2');
      const requestMi = Number(/^(\d+)Mi$/.exec(values.serviceDefaults.resources.requests.memory)?.[1]);
      expect(resident / MEBI).toBeLessThan(requestMi);

      // The drain CronJob's pass, then the redrive CronJob's, with the chart's outbox config.
      const drain = await run(['vpc-drain'], env);
      expect(drain.code, drain.output).toBe(0);
      expect(drain.output).toContain('vpc.fga_register_outbox: delivered 1');
      expect(drain.output).toContain(`${object}: 2 write(s), 0 delete(s)`);
      expect((await fga.client.read({ user: 'user:alice', relation: 'owner', object })).tuples).toHaveLength(1);
      const redrive = await run(
        ['outbox', 'redrive', '--config', OUTBOX_CONFIG, '--outbox', 'vpc', '--actor', 'outbox-vpc-redrive'],
        env,
      );
      expect(redrive.code, redrive.output).toBe(0);
      // Every outbox of the config is a table the migrations made, as the spec says.
      const status = await run(['outbox', 'status', '--config', OUTBOX_CONFIG, '--json'], env);
      expect(status.code, status.output).toBe(0);
      const names = (JSON.parse(status.output) as { outboxes: Array<{ name: string }> }).outboxes.map((o) => o.name);
      expect(names.sort()).toEqual(['compute', 'iam', 'nlb', 'registry', 'storage', 'vpc']);
      console.log(`bundled vpc, idle after a write: RSS ${(resident / MEBI).toFixed(0)} MiB (${values.nodeOptions})`);
    } finally {
      child.kill('SIGTERM');
      stopped = await exited;
    }
    // SIGTERM reached node, not a shell in between: a graceful stop.
    expect(stopped, output).toBe(0);
  });
});
