import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { expect, test } from 'vitest';
import { scriptedBacklog } from './testing/backlog.js';
import { openFgaEnv } from './testing/openfga-env.js';
import { CLI_NODE_ARGS, OUTBOX_BIN } from './testing/run-outbox.js';

// `outbox console` through the bin: it serves the console on the config's outbox until SIGTERM,
// read-only by default. (The pages themselves are tested in a browser in @outbox/console.)
const t = useTestDatabase();
const fga = useOpenFgaStore();

test('serves the six pages on the outbox, read-only, and stops on SIGTERM with exit 0', async () => {
  const b = await scriptedBacklog(t.db);
  const child = spawn(
    process.execPath,
    [
      ...CLI_NODE_ARGS,
      OUTBOX_BIN,
      'console',
      '--port',
      '0',
      '--database-url',
      t.url,
      '--table',
      b.spec.table,
      '--partition-column',
      'resource_id',
    ],
    { env: { PATH: process.env.PATH ?? '', ...openFgaEnv(fga) }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const found = /console: (http:\/\/127\.0\.0\.1:\d+)\//.exec(stdout);
      if (found?.[1]) resolve(found[1]);
    });
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${stdout}${stderr}`)));
  });
  try {
    expect(stdout).toContain('(read-only; 1 outbox(es))');
    for (const path of ['/', '/poisoned', '/timeline?partition=vpc:b', '/redrive', '/drift', '/provenance']) {
      const response = await fetch(`${url}${path}`);
      expect(response.status, path).toBe(200);
    }
    const page = await (await fetch(`${url}/poisoned`)).text();
    expect(page).toContain(`<tr data-id="${b.superseded}">`);
    expect(page).not.toContain('method="post"');
    expect((await fetch(`${url}/actions/retire`, { method: 'POST' })).status).toBe(404);
  } finally {
    child.kill('SIGTERM');
  }
  const [code] = (await once(child, 'exit')) as [number | null];
  expect(code, stderr).toBe(0);
});
