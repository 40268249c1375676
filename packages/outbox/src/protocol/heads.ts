import { sql } from 'kysely';
import type { AnyKysely } from '../any-kysely.js';
import type { OutboxSpec } from '../define-outbox.js';
import { settleStatement, type SettleOptions } from './drain-function-calls.js';
import { rowStates } from './row-states.js';
import { tableNames } from '../table-names.js';

/** A partition after {@link promoteHeads}: its head, or null when it has nothing deliverable left. */
export interface PromotedHead {
  readonly partitionKey: string;
  readonly headId: string | null;
}

/** Gives each key its earliest deliverable row as head, in one settle call; hold the demoted heads' row locks. */
export async function promoteHeads(
  trx: AnyKysely,
  spec: OutboxSpec,
  keys: readonly string[],
  options: SettleOptions = {},
): Promise<PromotedHead[]> {
  const statement = settleStatement(spec, keys, options);
  if (statement === undefined) return [];
  const result = await sql.raw<{ partition_key: string; head_id: string | null }>(statement).execute(trx);
  return result.rows.map((r) => ({
    partitionKey: r.partition_key,
    headId: r.head_id === null ? null : String(r.head_id),
  }));
}

/** Makes each key's earliest deliverable row its only head (redrive); hold the keys' advisory and row locks. */
export async function resetHeads(trx: AnyKysely, spec: OutboxSpec, keys: readonly string[]): Promise<void> {
  if (keys.length === 0) return;
  const names = tableNames(spec);
  await sql`
    update ${sql.raw(names.table)} t set is_head = false
    where t.${sql.raw(names.partition)} = any(${[...keys]}::text[]) and t.is_head
      and ${rowStates('t').pending}`.execute(trx);
  await promoteHeads(trx, spec, keys);
}
