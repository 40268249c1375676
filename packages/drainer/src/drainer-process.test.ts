import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxTable, defineOutbox, enqueueMany } from '@outbox/outbox';
import { useTestDatabase } from '@outbox/test-stack';
import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { createDrainer, createRecordingSink } from './index.js';

const t = useTestDatabase();
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const payload = { writes: [{ user: 'user:alice', relation: 'owner', object: 'vpc:1' }] };

describe('crashes and connections', () => {
  test('a drainer process SIGKILLed mid-batch: its rows return and are delivered later', async () => {
    const spec = defineOutbox({ table: 'crash.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const ids = await t.db.transaction().execute((trx) =>
      enqueueMany(trx, spec, ['vpc:1', 'vpc:1', 'vpc:2'].map((partitionKey) => ({ partitionKey, payload }))),
    );
    // One process (node with tsx's loader), so SIGKILL hits the process that holds the connection.
    const child = spawn(process.execPath, ['--import', 'tsx', resolve(import.meta.dirname, 'testing/kill-me-drainer.ts'), t.url, spec.table], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    for (let i = 0; i < 200 && !out.includes('claimed'); i += 1) await sleep(50);
    expect(out).toContain(`claimed ${ids.join(',')}`);

    // While the child holds the locks, nobody else can take those rows.
    const blocked = createRecordingSink();
    await createDrainer({ db: t.db, spec, sink: blocked, logger: quiet }).drainOnce();
    expect(blocked.delivered).toEqual([]);

    child.kill('SIGKILL');
    await once(child, 'exit');
    // Postgres notices the dead connection and rolls its transaction back: the locks go with it.
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet });
    for (let i = 0; i < 100 && sink.delivered.length < 3; i += 1) {
      await drainer.drainOnce();
      if (sink.delivered.length < 3) await sleep(50);
    }
    expect(sink.delivered.map((d) => d.id)).toEqual(ids);
    const attempts = await sql<{ attempt_count: number }>`select attempt_count from crash.outbox order by id`.execute(t.db);
    expect(attempts.rows.map((r) => r.attempt_count)).toEqual([0, 0, 0]); // the crash cost no attempt
  }, 60_000);

  test('LISTEN wakes the drainer within milliseconds of a commit, without the timer', async () => {
    const spec = defineOutbox({ table: 'listen.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const deliveredAt: number[] = [];
    const sink = createRecordingSink({ outcome: () => void deliveredAt.push(performance.now()) });
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 3_600_000, listen: { connectionString: t.url } });
    await drainer.start();
    await sleep(100); // the initial pass is done
    const latencies: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      await t.db.transaction().execute((trx) => enqueueMany(trx, spec, [{ partitionKey: `vpc:${i}`, payload }]));
      const committed = performance.now();
      for (let w = 0; w < 200 && deliveredAt.length <= i; w += 1) await sleep(2);
      latencies.push((deliveredAt[i] ?? Infinity) - committed);
    }
    await drainer.stop();
    expect(sink.delivered).toHaveLength(5);
    // Generous bound for a loaded 2-core CI machine; typically a few ms. The timer is an hour.
    for (const latency of latencies) expect(latency).toBeLessThan(250);
  });

  test('the listener reconnects after its connection is terminated; the timer delivers meanwhile', async () => {
    const spec = defineOutbox({ table: 'relisten.outbox', partitionColumn: 'resource_id' });
    await createOutboxTable(t.db, spec);
    const sink = createRecordingSink();
    const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, interval: 200, listen: { connectionString: t.url } });
    await drainer.start();
    const admin = new pg.Client({ connectionString: t.url });
    await admin.connect();
    const listenerPid = async () =>
      (await admin.query<{ pid: number }>(`select pid from pg_stat_activity where datname = current_database() and query ilike 'listen%'`)).rows[0]?.pid;
    let pid: number | undefined;
    for (let i = 0; i < 50 && pid === undefined; i += 1) pid = await listenerPid().then(async (p) => p ?? (await sleep(20), undefined));
    expect(pid).toBeDefined();
    await admin.query('select pg_terminate_backend($1)', [pid]);

    // With LISTEN down, the 200 ms timer still delivers.
    await t.db.transaction().execute((trx) => enqueueMany(trx, spec, [{ partitionKey: 'vpc:during', payload }]));
    for (let i = 0; i < 100 && sink.delivered.length < 1; i += 1) await sleep(20);
    expect(sink.delivered.map((d) => d.partitionKey)).toEqual(['vpc:during']);

    // And the listener comes back on a new connection.
    let newPid: number | undefined;
    for (let i = 0; i < 200 && (newPid === undefined || newPid === pid); i += 1) {
      newPid = await listenerPid();
      if (newPid === undefined || newPid === pid) await sleep(25);
    }
    expect(newPid).toBeDefined();
    expect(newPid).not.toBe(pid);
    await admin.end();
    await drainer.stop();
  });
});
