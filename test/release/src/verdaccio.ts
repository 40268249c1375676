import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '@outbox/test-stack';

/** A throwaway Verdaccio on loopback, and a user allowed to publish to it. */
export interface Registry {
  /** e.g. `http://127.0.0.1:43121/` (with the trailing slash npm configs use). */
  readonly url: string;
  /** A token of the registry's only user, for `//host:port/:_authToken`. */
  readonly token: string;
  /** Everything it logged. */
  output(): string;
  stop(): Promise<void>;
}

// No uplinks at all: whatever is not published to it answers 404, so nothing can reach it from (or
// be mistaken for) the public registry. Anyone may read; publishing takes the user created below.
function config(dir: string): string {
  return [
    `storage: ${join(dir, 'storage')}`,
    `auth: { htpasswd: { file: ${join(dir, 'htpasswd')}, max_users: 1 } }`,
    'uplinks: {}',
    "packages: { '**': { access: $all, publish: $authenticated } }",
    'log: { type: stdout, format: pretty, level: warn }',
    '',
  ].join('\n');
}

/** Starts Verdaccio with its storage and config in `dir` (an empty throwaway folder). */
export async function startRegistry(dir: string, startTimeoutMs = 30_000): Promise<Registry> {
  writeFileSync(join(dir, 'config.yaml'), config(dir));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  const bin = join(dirname(createRequire(import.meta.url).resolve('verdaccio/package.json')), 'bin', 'verdaccio');
  const child = spawn(process.execPath, [bin, '--config', join(dir, 'config.yaml'), '--listen', `127.0.0.1:${port}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit');
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    const deadline = Date.now() + startTimeoutMs;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`verdaccio exited with ${child.exitCode}:\n${output}`);
      const ping = await fetch(`${url}-/ping`).catch(() => undefined);
      if (ping?.ok) break;
      if (Date.now() > deadline)
        throw new Error(`verdaccio did not answer /-/ping within ${startTimeoutMs} ms:\n${output}`);
      await sleep(100);
    }
    // The registry API `npm adduser` uses; its answer carries the new user's token.
    const added = await fetch(`${url}-/user/org.couchdb.user:rehearsal`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'rehearsal', password: 'rehearsal-only' }),
    });
    const { token } = (await added.json()) as { token?: string };
    if (!added.ok || !token)
      throw new Error(`verdaccio refused to create the publishing user (${added.status}):\n${output}`);
    return { url, token, output: () => output, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
