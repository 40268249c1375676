-- The drainer's settle, v3 (docs/outbox-sql.md): under the partitions' advisory locks, marks the
-- delivered rows sent, then gives each key its earliest deliverable row after p_after as head.
-- Returns each key with its head (null: none left). Plan settings as the claim's.
create or replace function {{settle_function}}(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer)
returns table (partition_key text, head_id bigint)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- {{marker}}
begin
  -- Sorted by hash, as every taker of these locks does (no deadlocks).
  perform pg_advisory_xact_lock(l.h)
  from (select distinct hashtextextended({{table_literal}} || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
  order by l.h;
  update {{table}} t set sent_at = now(), is_head = false
  where t.id = any(p_delivered) and t.sent_at is null;
  -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks,
  -- so no key is left headless by an enqueue in flight.
  return query
    with want as (
      select u.k, (
        select x.id from {{table}} x
        where (x.{{partition}}, x.id) > (u.k, u.after) and (x.{{partition}}, x.id) <= (u.k, 9223372036854775807)
          and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
        order by x.{{partition}}, x.id
        limit 1
      ) as head_id
      from unnest(p_keys, p_after) as u(k, after)
    ), promoted as (
      -- By primary key (a join with want may be planned as a scan of the whole table).
      update {{table}} t set is_head = true
      where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
    )
    select w.k, w.head_id from want w;
end
$fn$
