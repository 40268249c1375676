import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { platformServices } from '@outbox/platform';
import { freePort } from '@outbox/test-stack';
import { describe, expect, test, vi } from 'vitest';
import { parse } from 'yaml';
import { containerImages } from '../../stack/src/containers.js';
import { CHART } from './helm.js';
import { REPO } from './image-bundle.js';

// deploy/compose/compose.yaml: its shape always; brought up for real only where a Docker engine
// answers, `docker compose` is there and the local images are built (CI builds none, so there the
// live test skips, saying why, as test/stack/src/containers.test.ts does).
const COMPOSE = join(REPO, 'deploy/compose/compose.yaml');
const SERVICES_IMAGE = 'outbox/services:local';

interface ComposeService {
  image?: string;
  pull_policy?: string;
  command?: string[];
  ports?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }>;
}
const compose = parse(readFileSync(COMPOSE, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };

/** `${NAME:-default}` → default: what the file means with nothing set. */
const withDefaults = (value: string) => value.replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1');

function docker(args: readonly string[], env: Record<string, string> = {}, timeoutMs = 20_000) {
  const result = spawnSync('docker', args, {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, ...env },
  });
  return { code: result.error ? null : result.status, output: `${result.stdout ?? ''}${result.stderr ?? ''}`.trim() };
}

/** Why the compose file cannot run here, or undefined when it can. */
function composeUnavailable(): string | undefined {
  if (process.env.DOCKER_HOST === undefined && !existsSync('/var/run/docker.sock'))
    return 'no Docker engine (no DOCKER_HOST, no /var/run/docker.sock)';
  const engine = docker(['version', '--format', '{{.Server.Version}}'], {}, 10_000);
  if (engine.code !== 0) return `no Docker engine answers (${engine.output.split('\n')[0] ?? 'no output'})`;
  const plugin = docker(['compose', 'version'], {}, 10_000);
  if (plugin.code !== 0) return '`docker compose` (the Compose v2 plugin) is not installed';
  const stack = containerImages();
  const images = [process.env.OUTBOX_SERVICES_IMAGE || SERVICES_IMAGE, stack.postgres, stack.openfga];
  const missing = images.filter((image) => docker(['image', 'inspect', image], {}, 10_000).code !== 0);
  if (missing.length > 0)
    return `the image(s) ${missing.join(', ')} are not present locally: build them with \`bash scripts/build-images.sh\``;
  return undefined;
}
const unavailable = composeUnavailable();

describe('the compose file (deploy/compose/compose.yaml)', () => {
  test('pulls nothing, publishes on 127.0.0.1 only, and runs the images the scripts build', () => {
    const services = compose.services;
    for (const [name, service] of Object.entries(services)) {
      expect(service.pull_policy, name).toBe('never');
      for (const port of service.ports ?? []) expect(port, name).toMatch(/^127\.0\.0\.1:/);
    }
    // The stack's default names (the variables override them there as here).
    vi.stubEnv('OUTBOX_POSTGRES_IMAGE', undefined);
    vi.stubEnv('OUTBOX_OPENFGA_IMAGE', undefined);
    const stack = containerImages();
    vi.unstubAllEnvs();
    expect(withDefaults(services.postgres?.image ?? '')).toBe(stack.postgres);
    expect(withDefaults(services.openfga?.image ?? '')).toBe(stack.openfga);
    expect(withDefaults(services['openfga-migrate']?.image ?? '')).toBe(withDefaults(services.openfga?.image ?? ''));
    // The chart and the build script name the services image as the compose file does.
    const values = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as {
      image: { repository: string; tag: string };
    };
    expect(`${values.image.repository}:${values.image.tag}`).toBe(SERVICES_IMAGE);
    expect(readFileSync(join(REPO, 'scripts/build-images.sh'), 'utf8')).toContain(
      `\${OUTBOX_SERVICES_IMAGE:-${SERVICES_IMAGE}}`,
    );

    expect(services.migrate?.command).toEqual(['migrate']);
    for (const { name, defaultPort } of platformServices) {
      const service = services[name];
      expect(withDefaults(service?.image ?? ''), name).toBe(SERVICES_IMAGE);
      expect(service?.command, name).toEqual([name]);
      expect(service?.ports?.map(withDefaults), name).toEqual([`127.0.0.1:${defaultPort}:${defaultPort}`]);
      expect(service?.environment, name).toMatchObject({ HOST: '0.0.0.0', OUTBOX_IDS_FILE: '/run/outbox/ids.env' });
      expect(service?.depends_on, name).toEqual({ migrate: { condition: 'service_completed_successfully' } });
    }
  });

  test(`comes up, every service ready, an organization created through iam, and goes${unavailable ? ` (skipped: ${unavailable})` : ''}`, async (ctx) => {
    ctx.skip(unavailable !== undefined, unavailable);
    const project = `outbox-test-${randomBytes(4).toString('hex')}`;
    const ports: Record<string, number> = {};
    const env: Record<string, string> = { POSTGRES_PASSWORD: randomBytes(12).toString('hex') };
    for (const { name } of platformServices) {
      ports[name] = await freePort();
      env[`${name.toUpperCase()}_PORT`] = String(ports[name]);
    }
    const base = ['compose', '-f', COMPOSE, '-p', project];
    try {
      // Not --wait: the one-shot services exit, and Compose versions differ on what --wait makes of that.
      // up itself waits for each dependency's condition (healthy, completed) before starting what needs it.
      const up = docker([...base, 'up', '-d'], env, 240_000);
      expect(up.code, up.output).toBe(0);
      for (const { name } of platformServices) {
        const url = `http://127.0.0.1:${ports[name]}/readyz`;
        const deadline = Date.now() + 90_000;
        let last = '';
        for (;;) {
          const answer = await fetch(url).then(
            async (r) => ({ status: r.status, body: await r.text() }),
            (error: unknown) => ({ status: 0, body: String(error) }),
          );
          if (answer.status === 200) break;
          last = `${answer.status} ${answer.body}`;
          if (Date.now() > deadline) throw new Error(`${name}: /readyz not 200 within 90 s: ${last}`);
          await sleep(500);
        }
      }
      const iam = `http://127.0.0.1:${ports.iam}`;
      const created = await fetch(`${iam}/organizations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-user-id': 'alice' },
        body: JSON.stringify({ name: 'acme' }),
      });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      const read = await fetch(`${iam}/organizations/${id}`, { headers: { 'x-user-id': 'alice' } });
      expect(read.status).toBe(200);
      expect((await fetch(`${iam}/organizations/${id}`, { headers: { 'x-user-id': 'mallory' } })).status).toBe(403);
    } finally {
      const down = docker([...base, 'down', '--volumes', '--timeout', '20'], env, 120_000);
      expect(down.code, down.output).toBe(0);
    }
  }, 300_000);
});
