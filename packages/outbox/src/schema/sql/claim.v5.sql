-- The drainer's claim, v5 (docs/outbox-sql.md): claim v4, returning each row's created_at too (the
-- drainer's commit -> delivered lag). Same rows, same plans: created_at is read from the row versions
-- already fetched. p_created_at (false: created_at is null) is what makes it a new overload: a
-- function's result cannot change in place, and drainers of the previous release call v4.
-- Up to p_heads due heads in claim-index order, then each head's run (the consecutive deliverable
-- rows after it), within p_batch rows. The partitions in p_flush_keys go first. Every row is locked
-- SKIP LOCKED: a drainer never waits on another. Generic plans, no sorts or scans, no JIT.
create or replace function {{claim_function}}(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[], p_created_at boolean)
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean, created_at timestamptz)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- {{marker}}
declare
  v_ids bigint[];
  v_keys text[];
  v_payloads jsonb[];
  v_attempts integer[];
  v_created timestamptz[];
  v_flushed bigint[] := '{}';
  v_tids tid[];
  v_run_ids bigint[];
  v_run_keys text[];
  v_room integer := p_batch;
  v_taken integer;
  v_share integer;
begin
  if not p_synchronous_commit then
    -- A commit lost in a crash only means its intents are delivered again, in order.
    perform set_config('synchronous_commit', 'off', true);
  end if;

  if coalesce(cardinality(p_flush_keys), 0) > 0 then
    -- Flushed partitions first: each key's due head, found and locked on the partition-head index
    -- (it may be far down the claim index, behind a backlog), the oldest flush first.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(case when p_created_at then h.created_at end order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts, v_created
      from (
        select f.*
        from (
          select u.k from unnest(p_flush_keys) with ordinality as u(k, n)
          group by u.k
          order by min(u.n)
          limit p_batch
        ) u
        cross join lateral (
          select x.id, x.{{partition}} as key, x.payload, x.attempt_count, x.created_at, x.next_attempt_at, x.sent_at, x.retired_at
          from {{table}} x
          where (x.{{partition}}, x.id) >= (u.k, '-9223372036854775808'::bigint) and (x.{{partition}}, x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null
            and x.is_head and x.next_attempt_at <= now()
          order by x.{{partition}}, x.id
          limit 1
          for update skip locked
        ) f
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
    v_flushed := v_ids;
    -- Their runs always: a flush waits for every row of its partition.
    if cardinality(v_ids) > 0 then
      return query select u.id, u.key, u.payload, u.attempt_count, true, u.created_at
        from unnest(v_ids, v_keys, v_payloads, v_attempts, v_created) as u(id, key, payload, attempt_count, created_at);
      v_room := v_room - cardinality(v_ids);
      if true and v_room > 0 then
        -- The first head's run takes all the room it needs.
        select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
               coalesce(array_agg(f.id order by f.key, f.id), '{}'),
               coalesce(array_agg(f.key order by f.key, f.id), '{}')
          into v_tids, v_run_ids, v_run_keys
          from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
          cross join lateral (
            select x.ctid as tid, x.id, h.key from {{table}} x
            where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x.{{partition}}, x.id
            limit v_room
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
            from {{table}} y
            where y.ctid = any(v_tids)
            for update skip locked
          )
          select r.id, r.key, r.payload, r.attempt_count, false, r.created_at
          from (
            select w.id, w.key, l.payload, l.attempt_count, l.created_at,
                   bool_and(l.id is not null and l.due) over (partition by w.key order by w.n) as ok
            from unnest(v_run_ids, v_run_keys) with ordinality as w(id, key, n)
            left join locked l on l.id = w.id
          ) r
          where r.ok;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
        -- The other heads share what it leaves.
        v_share := v_room / greatest(cardinality(v_ids) - 1, 1);
        if cardinality(v_ids) > 1 and v_share >= 1 then
          select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
                 coalesce(array_agg(f.id order by f.key, f.id), '{}'),
                 coalesce(array_agg(f.key order by f.key, f.id), '{}')
            into v_tids, v_run_ids, v_run_keys
            from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
            cross join lateral (
              select x.ctid as tid, x.id, h.key from {{table}} x
              where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
                and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
              order by x.{{partition}}, x.id
              limit v_share
            ) f;
          return query
            with locked as materialized (
              select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
              from {{table}} y
              where y.ctid = any(v_tids)
              for update skip locked
            )
            select r.id, r.key, r.payload, r.attempt_count, false, r.created_at
            from (
              select w.id, w.key, l.payload, l.attempt_count, l.created_at,
                     bool_and(l.id is not null and l.due) over (partition by w.key order by w.n) as ok
              from unnest(v_run_ids, v_run_keys) with ordinality as w(id, key, n)
              left join locked l on l.id = w.id
            ) r
            where r.ok;
          get diagnostics v_taken = row_count;
          v_room := v_room - v_taken;
        end if;
      end if;
    end if;
    if v_room < 1 then
      return;
    end if;
    -- The other due heads fill what the flushed partitions left.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(case when p_created_at then h.created_at end order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts, v_created
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from {{table}} t
        where t.is_head and t.next_attempt_at <= now() and t.id <> all(v_flushed)
        order by t.next_attempt_at, t.id
        limit greatest(least(p_heads, v_room), 1)
        for update skip locked
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
  elsif not p_runs then
    -- Heads only (the caller saw no partition with more than one row), as they come.
    return query
      select h.id, h.key, h.payload, h.attempt_count, true, case when p_created_at then h.created_at end
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from {{table}} t
        where t.is_head and t.next_attempt_at <= now()
        order by t.next_attempt_at, t.id
        limit greatest(least(p_heads, p_batch), 1)
        for update skip locked
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
    return;
  else
    -- Due heads in claim-index order. Only is_head and due in the scan, so it walks the claim
    -- index and stops at the limit; a head is deliverable by invariant, the outer filter checks.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(case when p_created_at then h.created_at end order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts, v_created
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from {{table}} t
        where t.is_head and t.next_attempt_at <= now()
        order by t.next_attempt_at, t.id
        limit greatest(least(p_heads, p_batch), 1)
        for update skip locked
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
  end if;

  -- The heads, then their runs, as for the flushed partitions above.
  if cardinality(v_ids) > 0 then
    return query select u.id, u.key, u.payload, u.attempt_count, true, u.created_at
      from unnest(v_ids, v_keys, v_payloads, v_attempts, v_created) as u(id, key, payload, attempt_count, created_at);
    v_room := v_room - cardinality(v_ids);
    if p_runs and v_room > 0 then
      -- A run: the followers read on the partition-head index (their ctids), then locked by ctid
      -- SKIP LOCKED and cut at the first one not locked or not due, so a run is consecutive.
      select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
             coalesce(array_agg(f.id order by f.key, f.id), '{}'),
             coalesce(array_agg(f.key order by f.key, f.id), '{}')
        into v_tids, v_run_ids, v_run_keys
        from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
        cross join lateral (
          select x.ctid as tid, x.id, h.key from {{table}} x
          where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
          order by x.{{partition}}, x.id
          limit v_room
        ) f;
      return query
        with locked as materialized (
          select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
          from {{table}} y
          where y.ctid = any(v_tids)
          for update skip locked
        )
        select r.id, r.key, r.payload, r.attempt_count, false, r.created_at
        from (
          select w.id, w.key, l.payload, l.attempt_count, l.created_at,
                 bool_and(l.id is not null and l.due) over (partition by w.key order by w.n) as ok
          from unnest(v_run_ids, v_run_keys) with ordinality as w(id, key, n)
          left join locked l on l.id = w.id
        ) r
        where r.ok;
      get diagnostics v_taken = row_count;
      v_room := v_room - v_taken;
      v_share := v_room / greatest(cardinality(v_ids) - 1, 1);
      if cardinality(v_ids) > 1 and v_share >= 1 then
        select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
               coalesce(array_agg(f.id order by f.key, f.id), '{}'),
               coalesce(array_agg(f.key order by f.key, f.id), '{}')
          into v_tids, v_run_ids, v_run_keys
          from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
          cross join lateral (
            select x.ctid as tid, x.id, h.key from {{table}} x
            where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x.{{partition}}, x.id
            limit v_share
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
            from {{table}} y
            where y.ctid = any(v_tids)
            for update skip locked
          )
          select r.id, r.key, r.payload, r.attempt_count, false, r.created_at
          from (
            select w.id, w.key, l.payload, l.attempt_count, l.created_at,
                   bool_and(l.id is not null and l.due) over (partition by w.key order by w.n) as ok
            from unnest(v_run_ids, v_run_keys) with ordinality as w(id, key, n)
            left join locked l on l.id = w.id
          ) r
          where r.ok;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
      end if;
    end if;
  end if;
end
$fn$
