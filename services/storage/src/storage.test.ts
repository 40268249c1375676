import { fileURLToPath } from 'node:url';
import { serviceEnv, smokeTestServiceProcess } from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { test } from 'vitest';
import { storageService } from './index.js';

// The behaviour of every register service is proved in services/platform (one suite over all five);
// this proves that this package's entry point runs it from the environment and stops cleanly.
const t = useTestDatabase();
const fga = useOpenFgaStore();

test('storage runs as a process: create, read, delete over HTTP, then a graceful SIGTERM', async () => {
  await fga.client.write({ writes: [{ user: 'user:alice', relation: 'editor', object: 'project:smoke' }] });
  await smokeTestServiceProcess({
    definition: storageService,
    packageDir: fileURLToPath(new URL('..', import.meta.url)),
    env: serviceEnv(t, fga),
    projectId: 'smoke',
    user: 'alice',
    body: { storage_class: 'archive' },
  });
});
