-- enqueue, v1 (docs/outbox-sql.md, "Enqueue"): the partitions' advisory locks, then one insert whose
-- head probe runs in a statement of its own, so its snapshot is taken after the locks were granted.
-- One round trip for the caller; the plans are made once per connection, under this function's
-- planner settings (the probe must walk the partition-head index whatever the statistics say).
-- Returns the new ids ascending, or NULL (nothing locked, nothing written) outside READ COMMITTED.
create or replace function {{enqueue_function}}(p_keys text[], p_payloads jsonb[], p_max_attempts integer)
returns bigint[]
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
-- {{marker}}
declare
  v_max integer;
  v_ids bigint[];
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    return null;
  end if;
  -- In hash order, as the settle and the reconciler take them: no deadlock between them.
  perform pg_advisory_xact_lock(l.h)
    from (select distinct hashtextextended({{table_literal}} || ' ' || k, 0) as h from unnest(p_keys) as k) l
    order by l.h;
  -- The table's recorded maxAttempts, else the caller's spec.
  v_max := coalesce({{recorded_max_attempts}}, p_max_attempts);
  -- The first new row of each key is head unless the key has a deliverable row: one probe per key
  -- (a LATERAL with LIMIT 1; an EXISTS may be planned as a hash over every pending row).
  with inserted as (
    insert into {{table}} ({{partition}}, payload, is_head)
    select u.k, u.p, u.first and live.found is null
    from (
      select w.k, w.p, w.ord, row_number() over (partition by w.k order by w.ord) = 1 as first
      from unnest(p_keys, p_payloads) with ordinality as w(k, p, ord)
    ) u
    left join lateral (
      select true as found from {{table}} x
      where u.first
        and (x.{{partition}}, x.id) >= (u.k, '-9223372036854775808'::bigint) and (x.{{partition}}, x.id) <= (u.k, 9223372036854775807)
        and x.sent_at is null and x.retired_at is null and x.attempt_count < v_max
      order by x.{{partition}}, x.id
      limit 1
    ) live on true
    order by u.ord
    returning id
  )
  select coalesce(array_agg(i.id order by i.id), '{}') into v_ids from inserted i;
  return v_ids;
end
$fn$
