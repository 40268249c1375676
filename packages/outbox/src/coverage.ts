import { sql, type RawBuilder } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';

/**
 * ` and (<supersededCoverageSql>) is not false`, or nothing without a fragment: the coverage half
 * of "superseded" (DESIGN §6), with `s` the delivered successor and `t` the poisoned row. `is not
 * false`: a fragment that is NULL for a pair (a row without the field it reads — written by an
 * earlier build, or by hand) cannot show that `s` leaves part of `t` undecided, so the pair falls
 * back to the plain rule (parked, reported) instead of reviving `t` over a delivery that may have
 * re-decided it: a wrong parking is reported at WARN, a wrong revival is silent and for good.
 *
 * @internal shared by `outboxStats` and @outbox/reconciler (a pass, retire), so the count and the
 * decisions follow one rule; not for application code.
 */
export function supersededCoverageCondition(spec: OutboxSpec): RawBuilder<unknown> {
  return spec.supersededCoverageSql ? sql.raw(` and (${spec.supersededCoverageSql}) is not false`) : sql``;
}
