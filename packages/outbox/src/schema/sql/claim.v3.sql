-- The drainer's claim, v3, as released (frozen: databases migrated before claim v4 run it). Claim
-- v4 without its plan settings, but a flushed head is joined back to the table to be locked, and a
-- run is read and locked in one statement (docs/outbox-sql.md says what v4 changed and why).
create or replace function {{claim_function}}(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean)
language plpgsql volatile
as $fn$
#variable_conflict use_column
-- {{marker}}
declare
  v_ids bigint[];
  v_keys text[];
  v_payloads jsonb[];
  v_attempts integer[];
  v_flushed bigint[] := '{}';
  v_room integer := p_batch;
  v_taken integer;
  v_share integer;
begin
  if not p_synchronous_commit then
    -- A commit lost in a crash only means its intents are delivered again, in order.
    perform set_config('synchronous_commit', 'off', true);
  end if;

  if coalesce(cardinality(p_flush_keys), 0) > 0 then
    -- Flushed partitions first: each key's head found on the partition-head index, then locked by id.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select y.id, y.{{partition}} as key, y.payload, y.attempt_count, y.next_attempt_at, y.sent_at, y.retired_at
        from (select distinct u.k from unnest(p_flush_keys) as u(k)) u
        cross join lateral (
          select x.id from {{table}} x
          where (x.{{partition}}, x.id) >= (u.k, '-9223372036854775808'::bigint) and (x.{{partition}}, x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.is_head
          order by x.{{partition}}, x.id
          limit 1
        ) f
        join {{table}} y on y.id = f.id
        where y.is_head and y.next_attempt_at <= now()
        order by y.next_attempt_at, y.id
        limit p_batch
        for update of y skip locked
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
    v_flushed := v_ids;
    -- Their runs always: a flush waits for every row of its partition.
    if cardinality(v_ids) > 0 then
      return query select u.id, u.key, u.payload, u.attempt_count, true
        from unnest(v_ids, v_keys, v_payloads, v_attempts) as u(id, key, payload, attempt_count);
      v_room := v_room - cardinality(v_ids);
      if true and v_room > 0 then
        -- The first head's run takes all the room it needs.
        return query
          select r.id, r.key, r.payload, r.attempt_count, false
          from (
            select l.*, row_number() over w as pos, bool_and(l.due) over w as due_so_far
            from (
              select y.id, y.{{partition}} as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
              from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
              cross join lateral (
                select q.tid, row_number() over (order by q.id) as rn
                from (
                  select x.ctid as tid, x.id from {{table}} x
                  where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
                    and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                  order by x.{{partition}}, x.id
                  limit v_room
                ) q
              ) f
              join {{table}} y on y.ctid = f.tid
              for update of y skip locked
            ) l
            window w as (partition by l.key order by l.id)
          ) r
          where r.rn = r.pos and r.due_so_far;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
        -- The other heads share what it leaves.
        v_share := v_room / greatest(cardinality(v_ids) - 1, 1);
        if cardinality(v_ids) > 1 and v_share >= 1 then
          return query
            select r.id, r.key, r.payload, r.attempt_count, false
            from (
              select l.*, row_number() over w as pos, bool_and(l.due) over w as due_so_far
              from (
                select y.id, y.{{partition}} as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
                from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
                cross join lateral (
                  select q.tid, row_number() over (order by q.id) as rn
                  from (
                    select x.ctid as tid, x.id from {{table}} x
                    where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
                      and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                    order by x.{{partition}}, x.id
                    limit v_share
                  ) q
                ) f
                join {{table}} y on y.ctid = f.tid
                for update of y skip locked
              ) l
              window w as (partition by l.key order by l.id)
            ) r
            where r.rn = r.pos and r.due_so_far;
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
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
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
      select h.id, h.key, h.payload, h.attempt_count, true
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from {{table}} t
        where t.is_head and t.next_attempt_at <= now()
        order by t.next_attempt_at, t.id
        limit greatest(least(p_heads, p_batch), 1)
        for update skip locked
      ) h
      where h.sent_at is null and h.retired_at is null and h.attempt_count < p_max_attempts;
    return;
  else
    -- Due heads in claim-index order; a head is deliverable by invariant, the outer filter checks.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t.{{partition}} as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
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
    return query select u.id, u.key, u.payload, u.attempt_count, true
      from unnest(v_ids, v_keys, v_payloads, v_attempts) as u(id, key, payload, attempt_count);
    v_room := v_room - cardinality(v_ids);
    if p_runs and v_room > 0 then
      -- A run: the followers locked by ctid SKIP LOCKED, cut at the first not locked or not due
      -- (rn numbers them as read, pos those locked: they part at the first gap).
      return query
        select r.id, r.key, r.payload, r.attempt_count, false
        from (
          select l.*, row_number() over w as pos, bool_and(l.due) over w as due_so_far
          from (
            select y.id, y.{{partition}} as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
            from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
            cross join lateral (
              select q.tid, row_number() over (order by q.id) as rn
              from (
                select x.ctid as tid, x.id from {{table}} x
                where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
                  and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                order by x.{{partition}}, x.id
                limit v_room
              ) q
            ) f
            join {{table}} y on y.ctid = f.tid
            for update of y skip locked
          ) l
          window w as (partition by l.key order by l.id)
        ) r
        where r.rn = r.pos and r.due_so_far;
      get diagnostics v_taken = row_count;
      v_room := v_room - v_taken;
      v_share := v_room / greatest(cardinality(v_ids) - 1, 1);
      if cardinality(v_ids) > 1 and v_share >= 1 then
        return query
          select r.id, r.key, r.payload, r.attempt_count, false
          from (
            select l.*, row_number() over w as pos, bool_and(l.due) over w as due_so_far
            from (
              select y.id, y.{{partition}} as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
              from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
              cross join lateral (
                select q.tid, row_number() over (order by q.id) as rn
                from (
                  select x.ctid as tid, x.id from {{table}} x
                  where (x.{{partition}}, x.id) > (h.key, h.id) and (x.{{partition}}, x.id) <= (h.key, 9223372036854775807)
                    and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                  order by x.{{partition}}, x.id
                  limit v_share
                ) q
              ) f
              join {{table}} y on y.ctid = f.tid
              for update of y skip locked
            ) l
            window w as (partition by l.key order by l.id)
          ) r
          where r.rn = r.pos and r.due_so_far;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
      end if;
    end if;
  end if;
end
$fn$
