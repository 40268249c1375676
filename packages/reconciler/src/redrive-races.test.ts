import { sql } from 'kysely';
import { tableNames } from '@outbox/outbox/protocol';
import { createDrainer, createRecordingSink } from '@outbox/drainer';
import { useTestDatabase } from '@outbox/test-stack';
import { describe, expect, test } from 'vitest';
import { createReconciler } from './index.js';
import { createTestOutbox, headViolations, recordingLogger } from './testing/outbox-fixture.js';

// Random interleavings of real writers, drainers, reconcilers and retire: no resurrection, the head invariant holds.
const t = useTestDatabase();
describe('races with real writers, drainers, two reconcilers and retire', () => {
  test.each([1, 2, 3, 4].map((i) => ({ seed: i * 7, partitionIndex: i % 2 === 0 })))(
    'no resurrection, head invariant in every committed snapshot, no hang (seed $seed, partitionIndex $partitionIndex)',
    async ({ seed: initial, partitionIndex }) => {
      const spec = await createTestOutbox(t.db, { maxAttempts: 2, partitionIndex });
      const names = tableNames(spec);
      const KEYS = ['vpc:a', 'vpc:b', 'vpc:c', 'vpc:d', ''];
      let seed = initial;
      const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;
      const sink = createRecordingSink({
        outcome: async () => {
          const roll = random();
          if (roll < 0.05) await new Promise((r) => setTimeout(r, 5));
          if (roll < 0.25) return { kind: 'transient', error: 'blip' };
          if (roll < 0.35) return { kind: 'permanent', error: 'refused' };
          return undefined;
        },
      });
      const drainers = [0, 1].map(() =>
        createDrainer({
          db: t.kysely({ max: 2 }),
          spec,
          sink,
          batchSize: 5,
          backoff: { baseMs: 0, maxMs: 2 },
          listen: false,
          logger: recordingLogger(),
        }),
      );
      const reconcilers = [0, 1].map(() =>
        createReconciler({
          db: t.kysely({ max: 2 }),
          spec,
          batchSize: 3,
          lockTimeoutMs: 2000,
          logger: recordingLogger(),
        }),
      );
      let running = true;
      const errors: unknown[] = [];
      const found: string[][] = [];
      const stats = { revived: 0, superseded: 0, deferred: 0, skipped: 0, retired: 0 };
      const writerDb = t.kysely({ max: 3 });
      const writer = async () => {
        for (let i = 0; i < 200; i += 1) {
          const key = pick(KEYS);
          // '' is refused by enqueue: write it as an operator would, under the partition lock.
          await writerDb.transaction().execute(async (trx) => {
            if (key !== '') {
              const { enqueue } = await import('@outbox/outbox');
              await enqueue(trx, spec, {
                partitionKey: `${key}`,
                payload: { writes: [{ user: 'project:p1', relation: 'project', object: 'vpc:x' }] },
              });
            } else {
              const { lockPartitions } = await import('@outbox/outbox/protocol');
              await lockPartitions(spec, ['']).execute(trx);
              await sql`insert into ${sql.raw(names.table)} (${sql.raw(names.partition)}, payload, is_head)
              select '', '{"writes":[{"user":"project:p1","relation":"project","object":"vpc:e"}]}'::jsonb,
                not exists (select 1 from ${sql.raw(names.table)} where ${sql.raw(names.partition)} = '' and sent_at is null and retired_at is null and attempt_count < ${spec.maxAttempts})`.execute(
                trx,
              );
            }
          });
          if (random() < 0.3) await new Promise((r) => setTimeout(r, 1));
        }
      };
      const drain = async (d: (typeof drainers)[number]) => {
        while (running) await d.drainOnce().catch((e: unknown) => errors.push(e));
      };
      const reconcile = async (r: (typeof reconcilers)[number]) => {
        while (running) {
          try {
            const result = await r.redrivePoisoned();
            stats.revived += result.revived.length;
            stats.deferred += result.deferred.length;
            stats.skipped += result.skipped ? 1 : 0;
            stats.superseded += result.superseded.length;
            if (result.superseded.length > 0 && random() < 0.5) {
              const retired = await r.retire(
                result.superseded.map((s) => s.id),
                'superseded in the race test',
              );
              stats.retired += retired.length;
            }
          } catch (e) {
            // Both reconcilers may report the same superseded row; the slower retire finds it retired.
            const refused = (e as { refused?: { refusal: string }[] }).refused;
            if (!(refused && refused.every((r) => r.refusal === 'retired'))) errors.push(e);
          }
          await new Promise((res) => setTimeout(res, 2));
        }
      };
      const check = async () => {
        while (running) {
          const v = await headViolations(t.db, spec);
          if (v.length > 0) found.push(v);
          await new Promise((r) => setTimeout(r, 3));
        }
      };
      const background = [...drainers.map(drain), ...reconcilers.map(reconcile), check()];
      await Promise.all([writer(), writer(), writer()]);
      running = false;
      await Promise.all(background);
      for (const d of drainers) await d.stop();

      expect(errors).toEqual([]);
      expect(found).toEqual([]);
      expect(await headViolations(t.db, spec)).toEqual([]);
      // No resurrection: within a partition no row reaches the sink for the first time after a later
      // row of its partition did.
      const last = new Map<string, bigint>();
      const seen = new Set<string>();
      const inversions: string[] = [];
      for (const intent of sink.delivered) {
        if (seen.has(intent.id)) continue;
        seen.add(intent.id);
        const previous = last.get(intent.partitionKey);
        if (previous !== undefined && BigInt(intent.id) < previous)
          inversions.push(`${intent.partitionKey}: ${intent.id} after ${previous}`);
        if (previous === undefined || BigInt(intent.id) > previous) last.set(intent.partitionKey, BigInt(intent.id));
      }
      expect(inversions).toEqual([]);
      // Sanity: the race exercised revivals, supersession and retire.
      expect(stats.revived).toBeGreaterThan(0);
      expect(stats.superseded).toBeGreaterThan(0);
    },
    120_000,
  );
});
