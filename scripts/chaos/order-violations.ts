import { vpcOutbox } from '@outbox/migrations';
import { sql } from 'kysely';
import type { AnyKysely } from '@outbox/outbox';

/** Partitions whose delivery broke per-partition order (docs/design.md §5). */
export interface OrderViolations {
  /** A delivered row with an earlier `sent_at` than a delivered row of smaller id. */
  readonly sentAtBackwards: readonly string[];
  /** A delivered row while a row of smaller id is still deliverable (pending with attempts left). */
  readonly deliveredPastDeliverable: readonly string[];
}

/**
 * Looks for both kinds of order violation in the vpc outbox, in one snapshot. The second holds at
 * every instant (a claim never takes a row past a deliverable predecessor, and the reconciler never
 * revives a row past a delivered successor), so the run samples it while the faults go on, too.
 *
 * @example
 * const { sentAtBackwards, deliveredPastDeliverable } = await findOrderViolations(db);
 */
export async function findOrderViolations(db: AnyKysely): Promise<OrderViolations> {
  const t = sql.table(vpcOutbox.table);
  const { rows } = await sql<{ kind: 'sent_at' | 'pending'; resource_id: string }>`
    with delivered as (
      select resource_id, sent_at < lag(sent_at) over (partition by resource_id order by id) as backwards
      from ${t} where sent_at is not null
    )
    select distinct 'sent_at' as kind, resource_id from delivered where backwards
    union all
    select distinct 'pending', p.resource_id
    from ${t} p
    where p.sent_at is null and p.retired_at is null and p.attempt_count < ${vpcOutbox.maxAttempts}
      and exists (select 1 from ${t} d where d.resource_id = p.resource_id and d.id > p.id and d.sent_at is not null)`.execute(
    db,
  );
  return {
    sentAtBackwards: rows.filter((r) => r.kind === 'sent_at').map((r) => r.resource_id),
    deliveredPastDeliverable: rows.filter((r) => r.kind === 'pending').map((r) => r.resource_id),
  };
}
