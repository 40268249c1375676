import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serviceClient } from '@outbox/service-kit';
import { runScript, serviceEnv, startPackageScript, waitFor } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';

// What an operator sees of a service process: its JSON log lines, the pid to signal, and why it
// would not start. Real Postgres and OpenFGA; the vpc package stands for every service (they all
// run through the kit's runServiceMain).
const t = useTestDatabase();
const fga = useOpenFgaStore();
const vpcDir = fileURLToPath(new URL('../../vpc', import.meta.url));

/** Its output as JSON log lines (a line that is not JSON fails the test). */
const lines = (output: string) =>
  output
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
/** The service's JSON lines among what pnpm prints around them (the script it runs, its exit). */
const logLines = (output: string) =>
  lines(
    output
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .join('\n'),
  );

/** The parent pid of `pid`, from /proc. */
const parentOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ')[1]);

describe('a service started with pnpm start', () => {
  test('logs JSON lines with its pid and URL; SIGHUP to that pid re-drives; SIGTERM to it stops it gracefully', async () => {
    const child = await startPackageScript(vpcDir, 'start', { ...serviceEnv(t, fga), PORT: '0' });
    try {
      const ready = logLines(child.output()).find((l) => typeof l.msg === 'string' && l.msg.startsWith('ready at '));
      expect(ready).toMatchObject({ level: 'info', service: 'vpc', url: child.url, pid: expect.any(Number) });
      const pid = ready?.pid as number;
      expect(ready?.msg).toContain(`(pid ${pid})`);
      // pnpm runs the script with sh, which the script's `exec` replaces: node is pnpm's own child,
      // so a signal sent to the logged pid reaches the service, not a wrapper that would orphan it.
      expect(parentOf(pid)).toBe(child.pid);
      expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(1, 4)).toEqual([
        '--import',
        'tsx',
        'src/main.ts',
      ]);

      const reply = await fetch(`${child.url}/vpcs`, { headers: { 'x-user-id': 'alice', 'x-request-id': 'ops-1' } });
      expect([reply.status, reply.headers.get('x-request-id')]).toEqual([200, 'ops-1']);
      await waitFor('the request line', async () =>
        logLines(child.output()).some((l) => l.reqId === 'ops-1' && l.msg === 'request completed'),
      );

      process.kill(pid, 'SIGHUP');
      await waitFor('the redrive line', async () =>
        logLines(child.output()).some((l) => typeof l.msg === 'string' && l.msg.startsWith('model changed: revived 0')),
      );
      expect((await serviceClient(child.url).get('/healthz')).status).toBe(200); // still running

      process.kill(pid, 'SIGTERM');
      await child.exited();
      expect(logLines(child.output()).map((l) => l.msg)).toEqual(
        expect.arrayContaining(['SIGTERM: stopping gracefully', 'stopped']),
      );
    } finally {
      await child.terminate();
    }
  });
});

describe('a service that cannot start', () => {
  const env = () => serviceEnv(t, fga);

  test.each([
    ['nope', /DATABASE_URL: expected a URL like postgres:\/\/user:password@host:5432\/database, got "nope"/],
    [
      'postgres://alice:s3cret@[bad/platform',
      /DATABASE_URL: expected a URL like postgres:\/\/.*got "postgres:\/\/alice:\*\*\*@\[bad\/platform"/,
    ],
    ['mysql://db/platform', /DATABASE_URL: expected a postgres:\/\/ URL, got one with mysql:/],
    [
      'postgres://alice:s3cret@127.0.0.1:1/platform',
      /DATABASE_URL: could not connect to the database at 127\.0\.0\.1:1\/platform: .*ECONNREFUSED/,
    ],
  ])(
    'DATABASE_URL=%s: exits 1 with one line naming DATABASE_URL and the problem (no password)',
    async (url, reason) => {
      const { code, output } = await runScript(vpcDir, 'src/main.ts', { ...env(), DATABASE_URL: url });
      expect(code, output).toBe(1);
      const [line, ...more] = lines(output);
      expect(more).toEqual([]);
      expect(line).toMatchObject({ level: 'error', service: 'vpc', field: 'DATABASE_URL' });
      expect(line?.msg).toMatch(/^could not start: /);
      expect(line?.msg).toMatch(reason);
      expect(output).not.toContain('s3cret');
    },
  );

  test('OPENFGA_STORE_ID that is not an OpenFGA id: one line naming OPENFGA_STORE_ID (the SDK said "storeId must be in ULID format")', async () => {
    const { code, output } = await runScript(vpcDir, 'src/main.ts', { ...env(), OPENFGA_STORE_ID: 'my-store' });
    expect(code, output).toBe(1);
    expect(lines(output)).toEqual([
      expect.objectContaining({
        field: 'OPENFGA_STORE_ID',
        msg: expect.stringMatching(/^could not start: OPENFGA_STORE_ID: expected an OpenFGA id/),
      }),
    ]);
  });

  test('a database that refuses the credentials: the same, naming the server it tried', async () => {
    const wrong = new URL(env().DATABASE_URL as string);
    wrong.username = 'nobody';
    wrong.password = 'wrong';
    const { code, output } = await runScript(vpcDir, 'src/main.ts', { ...env(), DATABASE_URL: wrong.toString() });
    expect(code, output).toBe(1);
    const [line, ...more] = lines(output);
    expect(more).toEqual([]);
    expect(line?.msg).toMatch(
      new RegExp(
        `^could not start: DATABASE_URL: could not connect to the database at ${wrong.hostname}:${wrong.port}`,
      ),
    );
    expect(output).not.toContain(':wrong@');
  });
});
