import { vpcOutbox } from '@outbox/migrations';
import { sql } from 'kysely';
import type { AnyKysely } from '@outbox/outbox';

/** What became of every intent the workload committed. */
export interface IntentOutcomes {
  readonly enqueued: number;
  readonly delivered: number;
  /** Bad intents poisoned, as they must be. */
  readonly badPoisoned: number;
  /** Good intents not delivered (pending, poisoned or superseded), by id. */
  readonly undelivered: readonly string[];
  /** Bad intents delivered or still deliverable, by id: OpenFGA must refuse them and the drainer poison them. */
  readonly badNotPoisoned: readonly string[];
  /** Committed ids missing from the table. */
  readonly missing: readonly string[];
  /** undelivered + badNotPoisoned + missing. */
  readonly lost: number;
}

/**
 * Classifies every committed intent: a good one must be delivered, a bad one poisoned (and not
 * delivered); anything else is lost.
 *
 * @example
 * const { lost } = await intentOutcomes(db, workload.enqueued, workload.badIds);
 */
export async function intentOutcomes(
  db: AnyKysely,
  enqueued: ReadonlySet<string>,
  badIds: ReadonlySet<string>,
): Promise<IntentOutcomes> {
  const { rows } = await sql<{ id: string; sent: boolean; poisoned: boolean }>`
    select id::text, sent_at is not null as sent, attempt_count >= ${vpcOutbox.maxAttempts} as poisoned
    from ${sql.table(vpcOutbox.table)}`.execute(db);
  const found = new Map(rows.map((r) => [r.id, r]));
  const undelivered: string[] = [];
  const badNotPoisoned: string[] = [];
  const missing: string[] = [];
  let delivered = 0;
  let badPoisoned = 0;
  for (const id of enqueued) {
    const row = found.get(id);
    if (!row) missing.push(id);
    else if (badIds.has(id)) {
      if (row.poisoned && !row.sent) badPoisoned += 1;
      else badNotPoisoned.push(id);
    } else if (row.sent) delivered += 1;
    else undelivered.push(id);
  }
  return {
    enqueued: enqueued.size,
    delivered,
    badPoisoned,
    undelivered,
    badNotPoisoned,
    missing,
    lost: undelivered.length + badNotPoisoned.length + missing.length,
  };
}
