import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { ensureOpenFgaBinary } from './openfga-binary.js';

test('an openfga that reports v1.18.10 is not taken for v1.18.1', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'outbox-fake-openfga-'));
  const fake = join(dir, 'openfga');
  await writeFile(fake, '#!/bin/sh\necho "OpenFGA version `v1.18.10` build from `abc` on `2026-01-01`"\n', {
    mode: 0o755,
  });
  const saved = process.env.OPENFGA_BIN;
  process.env.OPENFGA_BIN = fake;
  try {
    const found = await ensureOpenFgaBinary({ install: false }).catch((error: unknown) => error);
    expect(found).not.toBe(fake);
  } finally {
    if (saved === undefined) delete process.env.OPENFGA_BIN;
    else process.env.OPENFGA_BIN = saved;
    await rm(dir, { recursive: true, force: true });
  }
});
