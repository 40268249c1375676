import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { useOpenFgaStore, useTestDatabase } from './test-context.js';

describe("each test file's own database and OpenFGA store, on the real servers", () => {
  const t = useTestDatabase();
  const fga = useOpenFgaStore();

  test('Postgres: two workers claim disjoint rows with FOR UPDATE SKIP LOCKED', async () => {
    await sql`create table jobs (id int primary key)`.execute(t.db);
    await sql`insert into jobs select generate_series(1, 10)`.execute(t.db);
    const a = t.kysely({ max: 1 });
    const b = t.kysely({ max: 1 });
    await a.transaction().execute(async (ta) => {
      const first = await sql<{ id: number }>`select id from jobs order by id limit 4 for update skip locked`.execute(
        ta,
      );
      const second = await b
        .transaction()
        .execute(async (tb) =>
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
});
