import assert from 'node:assert/strict';
import type { RegisterServiceDefinition } from '../register-service.js';
import { serviceClient } from '../service-client.js';
import { startServiceProcess } from './service-process.js';

/** What {@link smokeTestServiceProcess} takes. */
export interface ProcessSmokeTest {
  readonly definition: RegisterServiceDefinition;
  /** The service package's folder (its `src/main.ts` is run). */
  readonly packageDir: string;
  /** DATABASE_URL and OPENFGA_* (see `serviceEnv`). */
  readonly env: Record<string, string>;
  /** A project on which `user` may edit (the test writes that tuple first). */
  readonly projectId: string;
  readonly user: string;
  /** The service's own fields of a valid create body. */
  readonly body: Record<string, unknown>;
}

/**
 * Runs the service as its `main` does (a child process configured by the environment), creates,
 * reads and deletes one resource over HTTP, then sends SIGTERM: the process must exit 0 after a
 * graceful stop. Throws an AssertionError on the first step that differs; returns the output.
 */
export async function smokeTestServiceProcess(test: ProcessSmokeTest): Promise<string> {
  const child = await startServiceProcess(test.packageDir, 'src/main.ts', {
    ...test.env,
    PORT: '0',
    DRAIN_INTERVAL_MS: '200',
  });
  try {
    const api = serviceClient(child.url, test.user);
    const path = test.definition.resourcePath;
    assert.equal((await api.get('/healthz')).status, 200);
    const created = await api.post<{ id: string }>(path, { project_id: test.projectId, name: 'smoke', ...test.body });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal((await api.get(`${path}/${created.body.id}`)).status, 200);
    assert.equal((await api.as('stranger').get(`${path}/${created.body.id}`)).status, 403);
    assert.equal((await api.delete(`${path}/${created.body.id}`)).status, 204);
    assert.equal((await api.get(`${path}/${created.body.id}`)).status, 404);
  } catch (error) {
    await child.terminate();
    throw new Error(`${(error as Error).message}\n--- service output ---\n${child.output()}`, { cause: error });
  }
  const code = await child.terminate();
  assert.equal(code, 0, `exit code after SIGTERM\n${child.output()}`);
  assert.match(child.output(), /SIGTERM: stopping gracefully/);
  return child.output();
}
