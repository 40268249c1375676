import { OpenFgaClient } from '@openfga/sdk';
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { startStack } from './stack.js';
import { useOpenFgaStore, useTestDatabase } from './test-context.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('the test stack', () => {
  const t = useTestDatabase();
  const fga = useOpenFgaStore();

  test('Postgres: two workers claim disjoint rows with FOR UPDATE SKIP LOCKED', async () => {
    await sql`create table jobs (id int primary key)`.execute(t.db);
    await sql`insert into jobs select generate_series(1, 10)`.execute(t.db);
    const a = t.kysely({ max: 1 });
    const b = t.kysely({ max: 1 });
    await a.transaction().execute(async (ta) => {
      const first = await sql<{ id: number }>`select id from jobs order by id limit 4 for update skip locked`.execute(ta);
      const second = await b.transaction().execute(async (tb) =>
        sql<{ id: number }>`select id from jobs order by id limit 4 for update skip locked`.execute(tb),
      );
      expect(first.rows.map((r) => r.id)).toEqual([1, 2, 3, 4]);
      expect(second.rows.map((r) => r.id)).toEqual([5, 6, 7, 8]);
    });
    await a.destroy();
    await b.destroy();
  });

  test('each test file has its own database cloned from the template', async () => {
    const { rows } = await sql<{ db: string }>`select current_database() as db`.execute(t.db);
    expect(rows[0]?.db).toBe(t.name);
    expect(t.name).toMatch(/^t_[0-9a-f]{12}$/);
  });

  test('OpenFGA: model loaded, a tuple written is read back by exact key, and check follows the model', async () => {
    await fga.client.write({
      writes: [
        { user: 'project:p1', relation: 'project', object: 'vpc:v1' },
        { user: 'user:bob', relation: 'viewer', object: 'project:p1' },
      ],
    });
    const { tuples } = await fga.client.read({ user: 'project:p1', relation: 'project', object: 'vpc:v1' });
    expect(tuples.map(({ key }) => ({ user: key.user, relation: key.relation, object: key.object }))).toEqual([
      { user: 'project:p1', relation: 'project', object: 'vpc:v1' },
    ]);
    // bob is a viewer of the project, so can_view on the vpc through the model's inheritance.
    const allowed = await fga.client.check({ user: 'user:bob', relation: 'can_view', object: 'vpc:v1' });
    expect(allowed.allowed).toBe(true);
    const refused = await fga.client.check({ user: 'user:eve', relation: 'can_view', object: 'vpc:v1' });
    expect(refused.allowed).toBe(false);
  });

  test('a native stack starts healthy and stop() leaves no process behind', async () => {
    // Servers named by the environment (a matrix run sets DATABASE_URL) would take precedence.
    const saved = { DATABASE_URL: process.env.DATABASE_URL, OPENFGA_API_URL: process.env.OPENFGA_API_URL };
    delete process.env.DATABASE_URL;
    delete process.env.OPENFGA_API_URL;
    const stack = await startStack({ mode: 'native' }).finally(() => Object.assign(process.env, JSON.parse(JSON.stringify(saved))));
    try {
      expect(stack.sources).toEqual({ postgres: 'native', openfga: 'native' });
      expect(stack.pids).toHaveLength(2);
      for (const pid of stack.pids) expect(alive(pid)).toBe(true);
      const health = await fetch(new URL('/healthz', stack.openfga.apiUrl));
      expect(await health.json()).toEqual({ status: 'SERVING' });
      const stores = await new OpenFgaClient({ apiUrl: stack.openfga.apiUrl }).listStores();
      expect(stores.stores).toEqual([]);
    } finally {
      await stack.stop();
    }
    for (const pid of stack.pids) expect(alive(pid)).toBe(false);
    // postgres backends and auxiliary processes go with the postmaster
    const { execFileSync } = await import('node:child_process');
    const leftovers = execFileSync('ps', ['-eo', 'ppid='], { encoding: 'utf8' })
      .split('\n')
      .map((line) => Number(line.trim()))
      .filter((ppid) => stack.pids.includes(ppid));
    expect(leftovers).toEqual([]);
  }, 120_000);
});
