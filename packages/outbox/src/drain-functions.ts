import { sql, type Kysely } from 'kysely';
import type { OutboxSpec } from './define-outbox.js';
import { partitionRangeSql } from './partition-range.js';
import { tableNames } from './table-names.js';

/**
 * The version marker written into both functions' bodies. `verifyOutboxTable` looks for it, so a
 * table migrated by an older release (or for another spec) is reported instead of misbehaving.
 */
export function drainFunctionMarker(spec: OutboxSpec, fn: 'claim' | 'settle'): string {
  return `@outbox/outbox ${fn} ${DRAIN_FUNCTION_VERSIONS[fn]} ${spec.table} ${spec.partitionColumn}`;
}

/**
 * Versions of the functions' bodies and signatures. claim v2 added `p_synchronous_commit`, v3
 * `p_flush_keys` (and, with settle v2, reads its partitions' rows with a row comparison; see
 * `after`); claim v4 and settle v3 (same signatures) run on generic plans. The older claim
 * overloads are left in place by `createDrainFunctions`, so drainers of a previous release keep
 * working through a rolling upgrade, and dropped by `dropOutboxTable`.
 */
const DRAIN_FUNCTION_VERSIONS = { claim: 'v4', settle: 'v3' } as const;

/** Every signature the claim and settle functions have had, for `dropOutboxTable`. */
export const DRAIN_FUNCTION_SIGNATURES = {
  claim: [
    '(integer, integer, integer, boolean, boolean, text[])',
    '(integer, integer, integer, boolean, boolean)',
    '(integer, integer, integer, boolean)',
  ],
  settle: ['(bigint[], text[], bigint[], integer)'],
} as const;

/**
 * How the functions' statements are planned, set for the duration of each call (a function's SET
 * clause: the caller's settings are back when it returns).
 *
 * - `plan_cache_mode = force_generic_plan`: each statement is planned once per connection. By
 *   default PostgreSQL re-plans a statement with parameters on every call unless its generic plan
 *   is estimated no dearer than the custom ones, which these never are (a LIMIT or an array whose
 *   size the generic plan cannot know). Planning again on every call cost about an eighth of a
 *   batch (claim and settle) on the drain benchmark's run shapes.
 * - `enable_sort = off`, `enable_seqscan = off`: every statement here that reads the table reads it
 *   by an index, in that index's order (the claim index for heads, the partition-head index for a
 *   partition's rows, the primary key or the TID for rows already found). Plans that sort or scan
 *   instead read a whole index or the whole table, and a generic plan has more ways to choose
 *   them: it knows neither the LIMIT nor the key; without statistics (a table not analyzed yet)
 *   the pending index looks nearly empty, so the planner sorts its rows rather than walk the
 *   partition-head index; and a plan made while the table was small (a scan of its one page) is
 *   kept when a burst fills it, until it is next analyzed. A disabled sort is still used where
 *   nothing else gives the order (a window over a run's rows, a few heads).
 * - `jit = off`: before PostgreSQL 18 a disabled node adds 10^10 to a plan's cost, far above
 *   `jit_above_cost`, and every call compiled its plans (a third of a second a claim on
 *   PostgreSQL 15). These statements read a few hundred rows: JIT never pays for them.
 */
const planSettings = 'set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off';

/**
 * The two server-side functions of the drainer's hot path, created with the table (DESIGN §4 lets
 * the drainer add what its claim needs). Being PL/pgSQL, their statements are planned once per
 * connection instead of once per batch, and each is one round trip:
 *
 * - `<table>_claim(batch, heads, max_attempts, runs, synchronous_commit, flush_keys)`: up to `heads`
 *   due heads in `(next_attempt_at, id)` order, `FOR UPDATE SKIP LOCKED`; then, when `runs` and
 *   the batch has room left, each claimed head's run: the deliverable rows that follow it in its
 *   partition — the first (oldest) head's run takes all the room left, the others share what it
 *   leaves equally — locked `SKIP LOCKED` and cut at the first row that is not due or not lockable,
 *   so a run is always consecutive. The partitions in `flush_keys` (those a `flush` waits for) go
 *   first: their due heads, found by key, and their runs, before the other heads fill what is
 *   left. Unless `synchronous_commit`, it sets `synchronous_commit = off` for the rest of the
 *   transaction (see the drainer's option of that name).
 * - `<table>_settle(delivered, keys, after, max_attempts)`: takes the partitions' advisory locks
 *   (sorted by hash, like enqueue and the reconciler), marks `delivered` rows sent, then — in a later
 *   statement, whose snapshot sees every enqueue that held one of those locks — gives each key its
 *   earliest deliverable row after `after` as head. Returns each key with its head (null: none left).
 *   Taking the locks before looking means no key is ever stranded headless by an enqueue in flight.
 */
export function drainFunctionsDdl(spec: OutboxSpec): string[] {
  const n = tableNames(spec);
  const p = n.partition;
  const deliverable = (alias: string) =>
    `${alias}.sent_at is null and ${alias}.retired_at is null and ${alias}.attempt_count < p_max_attempts`;
  // Look-ups on the partition-head index are written as ranges of rows (see `partitionRangeSql`).
  const after = (alias: string, key: string, id: string) => partitionRangeSql(alias, p, key, { id, inclusive: false });
  // Due heads in claim-index order, locked, skipping other drainers' (as "h"). Only is_head and
  // due in the scan's WHERE: the planner then walks the claim index in order and stops at the
  // limit. A head is deliverable by invariant; the outer filter double-checks.
  const heads = (limit: string, except = '') => `(
        select t.id, t.${p} as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from ${n.table} t
        where t.is_head and t.next_attempt_at <= now()${except}
        order by t.next_attempt_at, t.id
        limit ${limit}
        for update skip locked
      ) h
      where ${deliverable('h')}`;
  // The due heads of the partitions in p_flush_keys (the first p_batch of them, in the caller's
  // order: the drainer passes the oldest flush first), locked, skipping other drainers' (as "h"):
  // each key's head is found and locked on the partition-head index (a flushed partition's head may
  // be far down the claim index, behind a backlog); the lock re-checks it on the row's latest
  // version. Neither an ORDER BY over the heads nor a join back to the table: without statistics
  // either was planned along the claim index, every head read (see planSettings); collect orders them.
  const flushedHeads = `(
        select f.*
        from (
          select u.k from unnest(p_flush_keys) with ordinality as u(k, n)
          group by u.k
          order by min(u.n)
          limit p_batch
        ) u
        cross join lateral (
          select x.id, x.${p} as key, x.payload, x.attempt_count, x.next_attempt_at, x.sent_at, x.retired_at
          from ${n.table} x
          where ${partitionRangeSql('x', p, 'u.k')} and x.sent_at is null and x.retired_at is null
            and x.is_head and x.next_attempt_at <= now()
          order by x.${p}, x.id
          limit 1
          for update skip locked
        ) f
      ) h
      where ${deliverable('h')}`;
  // The heads of `source` as four arrays in claim order, into the four variables named `<prefix>_…`.
  const collect = (source: string, prefix: string) => `select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
             coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
             coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
             coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
        into ${prefix}_ids, ${prefix}_keys, ${prefix}_payloads, ${prefix}_attempts
        from ${source}`;
  // The deliverable rows after head h, in its partition (the lateral of the runs).
  const followers = (alias: string) => `${after(alias, 'h.key', 'h.id')} and ${deliverable(alias)}`;
  // The runs of the heads in `source` (rows of (id, key)), at most `limit` rows each: each head's
  // followers in id order, locked, cut at the first row that is not due or not lockable. Two
  // statements: the first reads the followers on the partition-head index (their ctids, ids and keys
  // in run order); the second locks those row versions by ctid (a TID scan: no second index descent),
  // skipping rows someone else holds (only by hand, in practice: only the holder of a partition's
  // head touches its followers), and keeps each run up to its first follower that was not locked or
  // is not due, so a run is always consecutive and the drainer never waits on a row lock. A row
  // updated since the read is no longer at its ctid, or no longer the version read there: it is not
  // locked, and cuts its run there.
  //
  // Both statements run on generic plans (the claim's plan_cache_mode), which these shapes keep
  // sound whatever the parameters: an index range scan per head, then a TID scan, then joins of
  // arrays. A single statement joining the look-up to the table by ctid had custom plans only (its
  // generic plan hashed the whole table), planned again on every call.
  const runs = (source: string, limit: string) => `
          select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
                 coalesce(array_agg(f.id order by f.key, f.id), '{}'),
                 coalesce(array_agg(f.key order by f.key, f.id), '{}')
            into v_tids, v_run_ids, v_run_keys
            from ${source} as h(id, key)
            cross join lateral (
              select x.ctid as tid, x.id, h.key from ${n.table} x
              where ${followers('x')}
              order by x.${p}, x.id -- the partition-head index's order
              limit ${limit}
            ) f;
          return query
            with locked as materialized (
              select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
              from ${n.table} y
              where y.ctid = any(v_tids)
              for update skip locked
            )
            select r.id, r.key, r.payload, r.attempt_count, false
            from (
              select w.id, w.key, l.payload, l.attempt_count,
                     bool_and(l.id is not null and l.due) over (partition by w.key order by w.n) as ok
              from unnest(v_run_ids, v_run_keys) with ordinality as w(id, key, n)
              left join locked l on l.id = w.id
            ) r
            where r.ok`;
  // The heads in v_ids (claim order) and then their runs, within v_room rows: the first head — the
  // oldest due one — gets all the room its run needs; whatever it leaves is shared equally by the
  // others. A partition with a long backlog then moves a full batch at a time while other
  // partitions still get their head delivered. Leaves in v_room what is left of the batch. `withRuns`
  // is the SQL condition to look for runs at all.
  const headsThenRuns = (withRuns: string) => `
        return query select u.id, u.key, u.payload, u.attempt_count, true
          from unnest(v_ids, v_keys, v_payloads, v_attempts) as u(id, key, payload, attempt_count);
        v_room := v_room - cardinality(v_ids);
        if ${withRuns} and v_room > 0 then
          ${runs('unnest(v_ids[1:1], v_keys[1:1])', 'v_room')};
          get diagnostics v_taken = row_count;
          v_room := v_room - v_taken;
          v_share := v_room / greatest(cardinality(v_ids) - 1, 1);
          if cardinality(v_ids) > 1 and v_share >= 1 then
            ${runs('unnest(v_ids[2:], v_keys[2:])', 'v_share')};
            get diagnostics v_taken = row_count;
            v_room := v_room - v_taken;
          end if;
        end if;`;
  return [
    `create or replace function ${n.claimFunction}(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])
    returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean)
    language plpgsql volatile ${planSettings} as $fn$
    #variable_conflict use_column
    -- ${drainFunctionMarker(spec, 'claim')}
    declare
      v_ids bigint[];
      v_keys text[];
      v_payloads jsonb[];
      v_attempts integer[];
      v_flushed bigint[] := '{}';
      v_tids tid[];
      v_run_ids bigint[];
      v_run_keys text[];
      v_room integer := p_batch;
      v_taken integer;
      v_share integer;
    begin
      if not p_synchronous_commit then
        -- This transaction's commit need not wait for the WAL flush: losing it in a crash only
        -- means its intents are delivered again, in order (at-least-once).
        perform set_config('synchronous_commit', 'off', true);
      end if;
      if coalesce(cardinality(p_flush_keys), 0) > 0 then
        -- Partitions a flush waits for go first, heads and runs; the other heads fill what they leave.
        ${collect(flushedHeads, 'v')};
        v_flushed := v_ids;
        -- Their runs always: a flush waits for its partition's every row, and few partitions are flushed at once.
        if cardinality(v_ids) > 0 then${headsThenRuns('true')}
        end if;
        if v_room < 1 then
          return;
        end if;
        ${collect(heads('greatest(least(p_heads, v_room), 1)', ' and t.id <> all(v_flushed)'), 'v')};
      elsif not p_runs then
        -- Heads only (the caller saw no partition with more than one row): return them as they come.
        return query
          select h.id, h.key, h.payload, h.attempt_count, true
          from ${heads('greatest(least(p_heads, p_batch), 1)')};
        return;
      else
        ${collect(heads('greatest(least(p_heads, p_batch), 1)'), 'v')};
      end if;
      if cardinality(v_ids) > 0 then${headsThenRuns('p_runs')}
      end if;
    end
    $fn$`,
    `create or replace function ${n.settleFunction}(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer)
    returns table (partition_key text, head_id bigint)
    language plpgsql volatile ${planSettings} as $fn$
    #variable_conflict use_column
    -- ${drainFunctionMarker(spec, 'settle')}
    begin
      -- Sorted by hash, as every taker of these locks does (no deadlocks).
      perform pg_advisory_xact_lock(l.h)
      from (select distinct hashtextextended('${spec.table}' || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
      order by l.h;
      update ${n.table} t set sent_at = now(), is_head = false
      where t.id = any(p_delivered) and t.sent_at is null;
      -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks.
      return query
        with want as (
          select u.k, (
            select x.id from ${n.table} x
            where ${after('x', 'u.k', 'u.after')} and ${deliverable('x')}
            order by x.${p}, x.id
            limit 1
          ) as head_id
          from unnest(p_keys, p_after) as u(k, after)
        ), promoted as (
          -- By primary key (a join with want may be planned as a scan of the whole table).
          update ${n.table} t set is_head = true
          where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
        )
        select w.k, w.head_id from want w;
    end
    $fn$`,
  ];
}

/**
 * Creates (or replaces) the drainer's functions of an existing outbox table: the upgrade step for a
 * table made by a build that did not have them, or whose functions `verifyOutboxTable` reports as
 * another release's. Idempotent; run it inside a migration. `createOutboxTable` already includes it.
 *
 * @example
 * export const up = (db: Kysely<any>) => createDrainFunctions(db, vpcOutbox);
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function createDrainFunctions(db: Kysely<any>, spec: OutboxSpec): Promise<void> {
  for (const statement of drainFunctionsDdl(spec)) await sql.raw(statement).execute(db);
}
