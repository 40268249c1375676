import { useTestDatabase } from '@outbox/test-stack';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, test } from 'vitest';
import { createServicePool } from './pool.js';
import { recordingLogger } from './testing/index.js';

const t = useTestDatabase();

test('a connection lost while checked out or while idle is logged, not thrown; the pool reconnects', async () => {
  const logger = recordingLogger();
  const pool = createServicePool(t.url, 2, logger);
  const held = await pool.connect(); // checked out, no query running: as the drainer's during a delivery
  const idle = await pool.connect();
  idle.release();
  const heldPid = (await held.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
  const idlePid = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
  const killer = t.pool();
  await killer.query('select pg_terminate_backend(pid) from unnest($1::int[]) as pid', [
    [heldPid, idlePid.rows[0]!.pid],
  ]);
  const warnings = () => logger.entries.filter((e) => e.level === 'warn').map((e) => e.message);
  const idleLost = () => warnings().some((w) => w.startsWith('postgres connection lost while idle in the pool'));
  const heldLost = () => warnings().some((w) => w.startsWith('postgres connection lost: '));
  for (let i = 0; i < 100 && !(idleLost() && heldLost()); i += 1) await sleep(20);
  // Vitest fails a test on an uncaught exception: reaching here means none was thrown. (pg may
  // report one loss twice: the server's FATAL message, then the closed socket.)
  expect(idleLost()).toBe(true);
  expect(heldLost()).toBe(true);
  expect(warnings().every((w) => w.startsWith('postgres connection lost'))).toBe(true);
  await expect(held.query('select 1')).rejects.toThrow();
  held.release(true);
  expect((await pool.query<{ one: number }>('select 1 as one')).rows).toEqual([{ one: 1 }]);
  await killer.end();
  await pool.end();
});
