-- The drainer's settle, v4 (docs/outbox-sql.md): settle v3, and the same update that marks the
-- delivered rows sent stamps the ones at risk of a late write for verification (docs/agreement.md,
-- "Late writes"). Returns each key with its head (null: none left). Plan settings as the claim's.
create or replace function {{settle_function}}(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer,
  p_verify_delay_ms integer, p_stamp bigint[], p_probe bigint[])
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
  update {{table}} t set sent_at = now(), is_head = false,
    -- Late writes: p_stamp rows follow another delivery of their partition in this batch; a p_probe
    -- row is stamped when its partition's previous delivery is younger than the delay (one probe of
    -- the (partition, id) btree, done only for it). p_verify_delay_ms null: none is stamped.
    verify_after = case
      when p_verify_delay_ms is null then null
      when t.id = any(p_stamp) then now() + p_verify_delay_ms * interval '1 millisecond'
      when t.id = any(p_probe) and (
        select x.sent_at from {{table}} x
        where (x.{{partition}}, x.id) < (t.{{partition}}, t.id) and (x.{{partition}}, x.id) > (t.{{partition}}, 0)
          and x.sent_at is not null
        order by x.{{partition}} desc, x.id desc
        limit 1
      ) > now() - p_verify_delay_ms * interval '1 millisecond' then now() + p_verify_delay_ms * interval '1 millisecond'
    end
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
