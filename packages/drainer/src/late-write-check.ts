import { enqueueMany, type AnyKysely, type IntentPayload } from '@outbox/outbox';
import { lockPartitions, planByIndex } from '@outbox/outbox/protocol';
import { keysAtRisk, lateWriteCorrections, tupleKeyOf, type KeyAtRisk } from './late-write-keys.js';
import {
  deliveryWindowsStatement,
  dueRowsStatement,
  partitionStatesStatement,
  settleDueRowsStatement,
} from './late-write-statements.js';
import type { ResolvedDrainerConfig } from './resolve-drainer-config.js';

/** Partitions one check takes: each may cost a read of the target while its due rows are locked. */
const PARTITIONS_PER_CHECK = 20;
/** A partition's newest rows read for its window: far more than one resource sees in seconds. */
const WINDOW_ROWS = 1_000;

/** What one late-write check did. */
export interface LateWriteCheck {
  /** Partitions checked, their due rows cleared. */
  readonly checked: number;
  /** Partitions whose keys at risk were read from the target. */
  readonly read: number;
  /** Partitions put off by a pending intent (or a delivery while they were read): checked again later. */
  readonly postponed: number;
  /** The corrections enqueued, per partition the target disagreed on. */
  readonly corrected: ReadonlyArray<{ readonly partitionKey: string; readonly ids: readonly string[] }>;
  /** Partitions whose window held more than the rows read: keys only older rows name are left to the audit. */
  readonly truncated: readonly string[];
  /** More partitions were due than one check takes. */
  readonly more: boolean;
}

/**
 * One step of the late-write check (docs/agreement.md, "Late writes"), in one READ COMMITTED
 * transaction: locks the due rows of up to {@link PARTITIONS_PER_CHECK} partitions (`SKIP LOCKED`);
 * for each without a pending intent, takes the keys its deliveries since the earliest due row's
 * window opened both wrote and deleted, reads them through the sink, and where the target differs
 * enqueues the correction — under the partition's enqueue lock, and only if nothing was delivered
 * or enqueued since the first look. A partition with a pending intent is checked again later.
 */
export async function checkLateWrites(
  config: ResolvedDrainerConfig,
  verifyDelayMs: number,
  signal: AbortSignal,
): Promise<LateWriteCheck> {
  const { db, spec, sink } = config;
  if (!sink.readTuples) throw new Error('the sink cannot read its target back (no readTuples)');
  const readTuples = sink.readTuples.bind(sink);
  const partitionStates = async (trx: AnyKysely, keys: readonly string[]) => {
    const result = await partitionStatesStatement(spec, keys).execute(trx);
    return new Map(result.rows.map((r) => [r.partition_key, r]));
  };

  return db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx) => {
      await planByIndex().execute(trx);
      const due = await dueRowsStatement(spec, verifyDelayMs, PARTITIONS_PER_CHECK).execute(trx);
      const partitions = new Map<string, { ids: string[]; from: Date }>();
      for (const row of due.rows) {
        const entry = partitions.get(row.partition_key) ?? { ids: [], from: row.window_from };
        entry.ids.push(row.id);
        if (row.window_from < entry.from) entry.from = row.window_from;
        partitions.set(row.partition_key, entry);
      }
      const more = (due.rows[0]?.candidates ?? 0) > PARTITIONS_PER_CHECK;
      if (partitions.size === 0) return { checked: 0, read: 0, postponed: 0, corrected: [], truncated: [], more };
      const keys = [...partitions.keys()];

      const first = await partitionStates(trx, keys);
      const windowsFrom = new Map([...partitions].map(([k, p]) => [k, p.from]));
      const windows = await deliveryWindowsStatement(spec, windowsFrom, WINDOW_ROWS).execute(trx);
      const newestFirst = new Map<string, IntentPayload[]>();
      for (const row of windows.rows)
        newestFirst.set(row.partition_key, [...(newestFirst.get(row.partition_key) ?? []), row.payload]);
      const truncated = [...newestFirst].filter(([, payloads]) => payloads.length > WINDOW_ROWS).map(([k]) => k);
      for (const k of truncated) newestFirst.get(k)?.splice(WINDOW_ROWS);

      const postponed = new Set<string>();
      const cleared = new Set<string>();
      const atRisk = new Map<string, KeyAtRisk[]>();
      for (const k of keys) {
        const risks = keysAtRisk(newestFirst.get(k) ?? []);
        if (first.get(k)?.pending) postponed.add(k);
        else if (risks.length === 0) cleared.add(k);
        else atRisk.set(k, risks);
      }

      const corrected: Array<{ partitionKey: string; ids: string[] }> = [];
      if (atRisk.size > 0) {
        const stored = await readTuples(
          [...atRisk.values()].flat().map((risk) => risk.tuple),
          { signal },
        );
        const live = new Set(stored.map(tupleKeyOf));
        const differing = new Map<string, ReturnType<typeof lateWriteCorrections>>();
        for (const [k, risks] of atRisk) {
          const intents = lateWriteCorrections(k, risks, live);
          if (intents.length === 0) cleared.add(k);
          else differing.set(k, intents);
        }
        if (differing.size > 0) {
          // Under the enqueue locks, in a later statement: what was read stands unless this
          // partition delivered or enqueued since the first look (no other intent commits meanwhile).
          await lockPartitions(spec, [...differing.keys()]).execute(trx);
          const now = await partitionStates(trx, [...differing.keys()]);
          for (const [k, intents] of differing) {
            const state = now.get(k);
            if (!state || state.pending || state.last_delivered !== first.get(k)?.last_delivered) {
              postponed.add(k);
              continue;
            }
            corrected.push({ partitionKey: k, ids: await enqueueMany(trx, spec, intents) });
            cleared.add(k);
          }
        }
      }

      const idsOf = (set: ReadonlySet<string>) => [...set].flatMap((k) => partitions.get(k)?.ids ?? []);
      await settleDueRowsStatement(spec, verifyDelayMs, {
        postponed: idsOf(postponed),
        cleared: idsOf(cleared),
      }).execute(trx);
      return { checked: cleared.size, read: atRisk.size, postponed: postponed.size, corrected, truncated, more };
    });
}
