-- ==== outboxTableDdlV1

do $schema$ begin
      if not exists (select from pg_catalog.pg_namespace where nspname = 'vpc') then
        create schema if not exists "vpc";
      end if;
    end $schema$;

create table "vpc"."fga_register_outbox" (
      id              bigint generated always as identity primary key,
      "resource_id"  text not null,
      payload         jsonb not null,
      created_at      timestamptz not null default now(),
      next_attempt_at timestamptz not null default now(),
      attempt_count   integer not null default 0,
      last_error      text,
      sent_at         timestamptz,
      retired_at      timestamptz,
      retired_reason  text,
      is_head         boolean not null default false
    ) with (
      -- Delivered rows leave dead index entries at the left edge of the claim index until vacuum:
      -- vacuum early and without throttling (docs/design.md §5). A long transaction anywhere holds this back.
      autovacuum_vacuum_scale_factor = 0,
      autovacuum_vacuum_threshold = 2000,
      autovacuum_vacuum_insert_scale_factor = 0,
      autovacuum_vacuum_insert_threshold = 10000,
      autovacuum_vacuum_cost_delay = 0,
      autovacuum_analyze_scale_factor = 0.02
    );

comment on column "vpc"."fga_register_outbox".is_head is 'drainer: true on the earliest deliverable row of each partition, maintained by enqueue, outcome updates and redrive';

comment on column "vpc"."fga_register_outbox".attempt_count is '@outbox/outbox max_attempts=10: attempts before an intent is poisoned. Change it only with setMaxAttempts (it keeps the rows consistent); verifyOutboxTable compares it with the spec.';

create index "fga_register_outbox_partition_head_idx" on "vpc"."fga_register_outbox" ("resource_id", id) where sent_at is null and retired_at is null;

create index "fga_register_outbox_pending_idx" on "vpc"."fga_register_outbox" (id) where sent_at is null and retired_at is null;

create index "fga_register_outbox_claim_idx" on "vpc"."fga_register_outbox" (next_attempt_at, id) where is_head;

create index "fga_register_outbox_retired_idx" on "vpc"."fga_register_outbox" (id) where retired_at is not null;

create function "vpc"."fga_register_outbox_notify"() returns trigger language plpgsql as $$
    begin
      perform pg_notify('vpc_fga_register_outbox', '');
      return null;
    end
    $$;

create trigger "fga_register_outbox_notify" after insert on "vpc"."fga_register_outbox" for each statement execute function "vpc"."fga_register_outbox_notify"();

-- ==== outboxTableDdlV1 with partitionIndex: the statement it adds

create index "fga_register_outbox_partition_idx" on "vpc"."fga_register_outbox" ("resource_id", id);

-- ==== drainFunctionsDdl claim v3, settle v2

-- The drainer's claim, v3, as released (frozen: databases migrated before claim v4 run it). Claim
-- v4 without its plan settings, but a flushed head is joined back to the table to be locked, and a
-- run is read and locked in one statement (docs/outbox-sql.md says what v4 changed and why).
create or replace function "vpc"."fga_register_outbox_claim"(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean)
language plpgsql volatile
as $fn$
#variable_conflict use_column
-- @outbox/outbox claim v3 vpc.fga_register_outbox resource_id
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
        select y.id, y."resource_id" as key, y.payload, y.attempt_count, y.next_attempt_at, y.sent_at, y.retired_at
        from (select distinct u.k from unnest(p_flush_keys) as u(k)) u
        cross join lateral (
          select x.id from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) >= (u.k, '-9223372036854775808'::bigint) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.is_head
          order by x."resource_id", x.id
          limit 1
        ) f
        join "vpc"."fga_register_outbox" y on y.id = f.id
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
              select y.id, y."resource_id" as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
              from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
              cross join lateral (
                select q.tid, row_number() over (order by q.id) as rn
                from (
                  select x.ctid as tid, x.id from "vpc"."fga_register_outbox" x
                  where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                    and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                  order by x."resource_id", x.id
                  limit v_room
                ) q
              ) f
              join "vpc"."fga_register_outbox" y on y.ctid = f.tid
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
                select y.id, y."resource_id" as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
                from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
                cross join lateral (
                  select q.tid, row_number() over (order by q.id) as rn
                  from (
                    select x.ctid as tid, x.id from "vpc"."fga_register_outbox" x
                    where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                      and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                    order by x."resource_id", x.id
                    limit v_share
                  ) q
                ) f
                join "vpc"."fga_register_outbox" y on y.ctid = f.tid
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
            select y.id, y."resource_id" as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
            from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
            cross join lateral (
              select q.tid, row_number() over (order by q.id) as rn
              from (
                select x.ctid as tid, x.id from "vpc"."fga_register_outbox" x
                where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                  and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                order by x."resource_id", x.id
                limit v_room
              ) q
            ) f
            join "vpc"."fga_register_outbox" y on y.ctid = f.tid
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
              select y.id, y."resource_id" as key, y.payload, y.attempt_count, f.rn, y.next_attempt_at <= now() as due
              from unnest(v_ids[2:], v_keys[2:]) as h(id, key)
              cross join lateral (
                select q.tid, row_number() over (order by q.id) as rn
                from (
                  select x.ctid as tid, x.id from "vpc"."fga_register_outbox" x
                  where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                    and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
                  order by x."resource_id", x.id
                  limit v_share
                ) q
              ) f
              join "vpc"."fga_register_outbox" y on y.ctid = f.tid
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
;

-- The drainer's settle, v2, as released (frozen: databases migrated before settle v3 run it):
-- settle v3 without its plan settings. Under the partitions' advisory locks, marks the delivered
-- rows sent, then gives each key its earliest deliverable row after p_after as head.
create or replace function "vpc"."fga_register_outbox_settle"(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer)
returns table (partition_key text, head_id bigint)
language plpgsql volatile
as $fn$
#variable_conflict use_column
-- @outbox/outbox settle v2 vpc.fga_register_outbox resource_id
begin
  -- Sorted by hash, as every taker of these locks does (no deadlocks).
  perform pg_advisory_xact_lock(l.h)
  from (select distinct hashtextextended('vpc.fga_register_outbox' || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
  order by l.h;
  update "vpc"."fga_register_outbox" t set sent_at = now(), is_head = false
  where t.id = any(p_delivered) and t.sent_at is null;
  -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks,
  -- so no key is left headless by an enqueue in flight.
  return query
    with want as (
      select u.k, (
        select x.id from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) > (u.k, u.after) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
          and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
        order by x."resource_id", x.id
        limit 1
      ) as head_id
      from unnest(p_keys, p_after) as u(k, after)
    ), promoted as (
      -- By primary key (a join with want may be planned as a scan of the whole table).
      update "vpc"."fga_register_outbox" t set is_head = true
      where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
    )
    select w.k, w.head_id from want w;
end
$fn$
;

-- ==== drainFunctionsDdl claim v4, settle v3

-- The drainer's claim, v4 (docs/outbox-sql.md): up to p_heads due heads in claim-index order, then
-- each head's run (the consecutive deliverable rows after it), within p_batch rows. The partitions
-- in p_flush_keys go first. Every row is locked SKIP LOCKED: a drainer never waits on another.
-- Generic plans, no sorts or scans, no JIT: planned once per connection (docs/outbox-sql.md).
create or replace function "vpc"."fga_register_outbox_claim"(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox claim v4 vpc.fga_register_outbox resource_id
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
    -- A commit lost in a crash only means its intents are delivered again, in order.
    perform set_config('synchronous_commit', 'off', true);
  end if;

  if coalesce(cardinality(p_flush_keys), 0) > 0 then
    -- Flushed partitions first: each key's due head, found and locked on the partition-head index
    -- (it may be far down the claim index, behind a backlog), the oldest flush first.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select f.*
        from (
          select u.k from unnest(p_flush_keys) with ordinality as u(k, n)
          group by u.k
          order by min(u.n)
          limit p_batch
        ) u
        cross join lateral (
          select x.id, x."resource_id" as key, x.payload, x.attempt_count, x.next_attempt_at, x.sent_at, x.retired_at
          from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) >= (u.k, '-9223372036854775808'::bigint) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null
            and x.is_head and x.next_attempt_at <= now()
          order by x."resource_id", x.id
          limit 1
          for update skip locked
        ) f
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
        select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
               coalesce(array_agg(f.id order by f.key, f.id), '{}'),
               coalesce(array_agg(f.key order by f.key, f.id), '{}')
          into v_tids, v_run_ids, v_run_keys
          from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
          cross join lateral (
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_room
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
              select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
              where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
              order by x."resource_id", x.id
              limit v_share
            ) f;
          return query
            with locked as materialized (
              select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
              from "vpc"."fga_register_outbox" y
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
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
      -- A run: the followers read on the partition-head index (their ctids), then locked by ctid
      -- SKIP LOCKED and cut at the first one not locked or not due, so a run is consecutive.
      select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
             coalesce(array_agg(f.id order by f.key, f.id), '{}'),
             coalesce(array_agg(f.key order by f.key, f.id), '{}')
        into v_tids, v_run_ids, v_run_keys
        from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
        cross join lateral (
          select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
          order by x."resource_id", x.id
          limit v_room
        ) f;
      return query
        with locked as materialized (
          select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
          from "vpc"."fga_register_outbox" y
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
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_share
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
          where r.ok;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
      end if;
    end if;
  end if;
end
$fn$
;

-- The drainer's settle, v3 (docs/outbox-sql.md): under the partitions' advisory locks, marks the
-- delivered rows sent, then gives each key its earliest deliverable row after p_after as head.
-- Returns each key with its head (null: none left). Plan settings as the claim's.
create or replace function "vpc"."fga_register_outbox_settle"(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer)
returns table (partition_key text, head_id bigint)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox settle v3 vpc.fga_register_outbox resource_id
begin
  -- Sorted by hash, as every taker of these locks does (no deadlocks).
  perform pg_advisory_xact_lock(l.h)
  from (select distinct hashtextextended('vpc.fga_register_outbox' || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
  order by l.h;
  update "vpc"."fga_register_outbox" t set sent_at = now(), is_head = false
  where t.id = any(p_delivered) and t.sent_at is null;
  -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks,
  -- so no key is left headless by an enqueue in flight.
  return query
    with want as (
      select u.k, (
        select x.id from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) > (u.k, u.after) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
          and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
        order by x."resource_id", x.id
        limit 1
      ) as head_id
      from unnest(p_keys, p_after) as u(k, after)
    ), promoted as (
      -- By primary key (a join with want may be planned as a scan of the whole table).
      update "vpc"."fga_register_outbox" t set is_head = true
      where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
    )
    select w.k, w.head_id from want w;
end
$fn$
;

-- ==== drainFunctionsDdl claim v4, settle v4

-- The drainer's claim, v4 (docs/outbox-sql.md): up to p_heads due heads in claim-index order, then
-- each head's run (the consecutive deliverable rows after it), within p_batch rows. The partitions
-- in p_flush_keys go first. Every row is locked SKIP LOCKED: a drainer never waits on another.
-- Generic plans, no sorts or scans, no JIT: planned once per connection (docs/outbox-sql.md).
create or replace function "vpc"."fga_register_outbox_claim"(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[])
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox claim v4 vpc.fga_register_outbox resource_id
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
    -- A commit lost in a crash only means its intents are delivered again, in order.
    perform set_config('synchronous_commit', 'off', true);
  end if;

  if coalesce(cardinality(p_flush_keys), 0) > 0 then
    -- Flushed partitions first: each key's due head, found and locked on the partition-head index
    -- (it may be far down the claim index, behind a backlog), the oldest flush first.
    select coalesce(array_agg(h.id order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.key order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.payload order by h.next_attempt_at, h.id), '{}'),
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select f.*
        from (
          select u.k from unnest(p_flush_keys) with ordinality as u(k, n)
          group by u.k
          order by min(u.n)
          limit p_batch
        ) u
        cross join lateral (
          select x.id, x."resource_id" as key, x.payload, x.attempt_count, x.next_attempt_at, x.sent_at, x.retired_at
          from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) >= (u.k, '-9223372036854775808'::bigint) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null
            and x.is_head and x.next_attempt_at <= now()
          order by x."resource_id", x.id
          limit 1
          for update skip locked
        ) f
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
        select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
               coalesce(array_agg(f.id order by f.key, f.id), '{}'),
               coalesce(array_agg(f.key order by f.key, f.id), '{}')
          into v_tids, v_run_ids, v_run_keys
          from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
          cross join lateral (
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_room
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
              select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
              where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
              order by x."resource_id", x.id
              limit v_share
            ) f;
          return query
            with locked as materialized (
              select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
              from "vpc"."fga_register_outbox" y
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
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
           coalesce(array_agg(h.attempt_count order by h.next_attempt_at, h.id), '{}')
      into v_ids, v_keys, v_payloads, v_attempts
      from (
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
      -- A run: the followers read on the partition-head index (their ctids), then locked by ctid
      -- SKIP LOCKED and cut at the first one not locked or not due, so a run is consecutive.
      select coalesce(array_agg(f.tid order by f.key, f.id), '{}'),
             coalesce(array_agg(f.id order by f.key, f.id), '{}'),
             coalesce(array_agg(f.key order by f.key, f.id), '{}')
        into v_tids, v_run_ids, v_run_keys
        from unnest(v_ids[1:1], v_keys[1:1]) as h(id, key)
        cross join lateral (
          select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
          order by x."resource_id", x.id
          limit v_room
        ) f;
      return query
        with locked as materialized (
          select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
          from "vpc"."fga_register_outbox" y
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
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_share
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
          where r.ok;
        get diagnostics v_taken = row_count;
        v_room := v_room - v_taken;
      end if;
    end if;
  end if;
end
$fn$
;

-- The drainer's settle, v4 (docs/outbox-sql.md): settle v3, and the same update that marks the
-- delivered rows sent stamps the ones at risk of a late write for verification (docs/agreement.md,
-- "Late writes"). Returns each key with its head (null: none left). Plan settings as the claim's.
create or replace function "vpc"."fga_register_outbox_settle"(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer,
  p_verify_delay_ms integer, p_stamp bigint[], p_probe bigint[])
returns table (partition_key text, head_id bigint)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox settle v4 vpc.fga_register_outbox resource_id
begin
  -- Sorted by hash, as every taker of these locks does (no deadlocks).
  perform pg_advisory_xact_lock(l.h)
  from (select distinct hashtextextended('vpc.fga_register_outbox' || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
  order by l.h;
  update "vpc"."fga_register_outbox" t set sent_at = now(), is_head = false,
    -- Late writes: p_stamp rows follow another delivery of their partition in this batch; a p_probe
    -- row is stamped when its partition's previous delivery is younger than the delay (one probe of
    -- the (partition, id) btree, done only for it). p_verify_delay_ms null: none is stamped.
    verify_after = case
      when p_verify_delay_ms is null then null
      when t.id = any(p_stamp) then now() + p_verify_delay_ms * interval '1 millisecond'
      when t.id = any(p_probe) and (
        select x.sent_at from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) < (t."resource_id", t.id) and (x."resource_id", x.id) > (t."resource_id", 0)
          and x.sent_at is not null
        order by x."resource_id" desc, x.id desc
        limit 1
      ) > now() - p_verify_delay_ms * interval '1 millisecond' then now() + p_verify_delay_ms * interval '1 millisecond'
    end
  where t.id = any(p_delivered) and t.sent_at is null;
  -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks,
  -- so no key is left headless by an enqueue in flight.
  return query
    with want as (
      select u.k, (
        select x.id from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) > (u.k, u.after) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
          and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
        order by x."resource_id", x.id
        limit 1
      ) as head_id
      from unnest(p_keys, p_after) as u(k, after)
    ), promoted as (
      -- By primary key (a join with want may be planned as a scan of the whole table).
      update "vpc"."fga_register_outbox" t set is_head = true
      where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
    )
    select w.k, w.head_id from want w;
end
$fn$
;

-- ==== drainFunctionsDdl claim v5, settle v4

-- The drainer's claim, v5 (docs/outbox-sql.md): claim v4, returning each row's created_at too (the
-- drainer's commit -> delivered lag). Same rows, same plans: created_at is read from the row versions
-- already fetched. p_created_at (false: created_at is null) is what makes it a new overload: a
-- function's result cannot change in place, and drainers of the previous release call v4.
-- Up to p_heads due heads in claim-index order, then each head's run (the consecutive deliverable
-- rows after it), within p_batch rows. The partitions in p_flush_keys go first. Every row is locked
-- SKIP LOCKED: a drainer never waits on another. Generic plans, no sorts or scans, no JIT.
create or replace function "vpc"."fga_register_outbox_claim"(p_batch integer, p_heads integer, p_max_attempts integer, p_runs boolean, p_synchronous_commit boolean, p_flush_keys text[], p_created_at boolean)
returns table (id bigint, partition_key text, payload jsonb, attempt_count integer, head boolean, created_at timestamptz)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox claim v5 vpc.fga_register_outbox resource_id
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
          select x.id, x."resource_id" as key, x.payload, x.attempt_count, x.created_at, x.next_attempt_at, x.sent_at, x.retired_at
          from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) >= (u.k, '-9223372036854775808'::bigint) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null
            and x.is_head and x.next_attempt_at <= now()
          order by x."resource_id", x.id
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
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_room
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
              select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
              where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
                and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
              order by x."resource_id", x.id
              limit v_share
            ) f;
          return query
            with locked as materialized (
              select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
              from "vpc"."fga_register_outbox" y
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
        select t.id, t."resource_id" as key, t.payload, t.attempt_count, t.created_at, t.next_attempt_at, t.sent_at, t.retired_at
        from "vpc"."fga_register_outbox" t
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
          select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
          where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
            and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
          order by x."resource_id", x.id
          limit v_room
        ) f;
      return query
        with locked as materialized (
          select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
          from "vpc"."fga_register_outbox" y
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
            select x.ctid as tid, x.id, h.key from "vpc"."fga_register_outbox" x
            where (x."resource_id", x.id) > (h.key, h.id) and (x."resource_id", x.id) <= (h.key, 9223372036854775807)
              and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
            order by x."resource_id", x.id
            limit v_share
          ) f;
        return query
          with locked as materialized (
            select y.id, y.payload, y.attempt_count, case when p_created_at then y.created_at end as created_at, y.next_attempt_at <= now() as due
            from "vpc"."fga_register_outbox" y
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
;

-- The drainer's settle, v4 (docs/outbox-sql.md): settle v3, and the same update that marks the
-- delivered rows sent stamps the ones at risk of a late write for verification (docs/agreement.md,
-- "Late writes"). Returns each key with its head (null: none left). Plan settings as the claim's.
create or replace function "vpc"."fga_register_outbox_settle"(p_delivered bigint[], p_keys text[], p_after bigint[], p_max_attempts integer,
  p_verify_delay_ms integer, p_stamp bigint[], p_probe bigint[])
returns table (partition_key text, head_id bigint)
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
#variable_conflict use_column
-- @outbox/outbox settle v4 vpc.fga_register_outbox resource_id
begin
  -- Sorted by hash, as every taker of these locks does (no deadlocks).
  perform pg_advisory_xact_lock(l.h)
  from (select distinct hashtextextended('vpc.fga_register_outbox' || ' ' || u.k, 0) as h from unnest(p_keys) as u(k)) l
  order by l.h;
  update "vpc"."fga_register_outbox" t set sent_at = now(), is_head = false,
    -- Late writes: p_stamp rows follow another delivery of their partition in this batch; a p_probe
    -- row is stamped when its partition's previous delivery is younger than the delay (one probe of
    -- the (partition, id) btree, done only for it). p_verify_delay_ms null: none is stamped.
    verify_after = case
      when p_verify_delay_ms is null then null
      when t.id = any(p_stamp) then now() + p_verify_delay_ms * interval '1 millisecond'
      when t.id = any(p_probe) and (
        select x.sent_at from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) < (t."resource_id", t.id) and (x."resource_id", x.id) > (t."resource_id", 0)
          and x.sent_at is not null
        order by x."resource_id" desc, x.id desc
        limit 1
      ) > now() - p_verify_delay_ms * interval '1 millisecond' then now() + p_verify_delay_ms * interval '1 millisecond'
    end
  where t.id = any(p_delivered) and t.sent_at is null;
  -- A new statement: its snapshot sees every enqueue of these partitions committed before the locks,
  -- so no key is left headless by an enqueue in flight.
  return query
    with want as (
      select u.k, (
        select x.id from "vpc"."fga_register_outbox" x
        where (x."resource_id", x.id) > (u.k, u.after) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
          and x.sent_at is null and x.retired_at is null and x.attempt_count < p_max_attempts
        order by x."resource_id", x.id
        limit 1
      ) as head_id
      from unnest(p_keys, p_after) as u(k, after)
    ), promoted as (
      -- By primary key (a join with want may be planned as a scan of the whole table).
      update "vpc"."fga_register_outbox" t set is_head = true
      where t.id = any(array(select w.head_id from want w where w.head_id is not null)) and not t.is_head
    )
    select w.k, w.head_id from want w;
end
$fn$
;

-- ==== ledgerLifeDdlV1

alter table "vpc"."fga_register_outbox"
      add column poison_cause  text,
      add column poison_code   text,
      add column revival_count integer not null default 0,
      add column revive_after  timestamptz,
      add column revive_requested boolean not null default false,
      add column closed_as     text,
      add constraint "fga_register_outbox_poison_cause_check" check (poison_cause in ('exhausted', 'refused')) not valid,
      add constraint "fga_register_outbox_closed_as_check" check (closed_as in ('retired', 'discarded')) not valid;

comment on column "vpc"."fga_register_outbox".poison_cause is 'why the row is poisoned: exhausted (transient failures) or refused (permanently, code in poison_code); NULL on rows poisoned before it existed, read as exhausted';

comment on column "vpc"."fga_register_outbox".revive_requested is 'a refused row a model change or an operator asked to retry: revived once revive_after (the growing spacing between its revivals) has passed';

comment on column "vpc"."fga_register_outbox".closed_as is 'how retired_at was set: retired (superseded) or discarded (not superseded, its tuples never written); NULL read as retired';

create index if not exists "fga_register_outbox_delivered_idx" on "vpc"."fga_register_outbox" ("resource_id", id) where sent_at is not null;

-- ==== lateWriteVerificationDdl

alter table "vpc"."fga_register_outbox" add column verify_after timestamptz;

comment on column "vpc"."fga_register_outbox".verify_after is 'drainer: when to check that no late write undid this delivery; null: nothing to check';

create index "fga_register_outbox_verify_idx" on "vpc"."fga_register_outbox" (verify_after) where verify_after is not null;

-- ==== enqueueFunctionDdl v1

-- enqueue, v1 (docs/outbox-sql.md, "Enqueue"): the partitions' advisory locks, then one insert whose
-- head probe runs in a statement of its own, so its snapshot is taken after the locks were granted.
-- One round trip for the caller; the plans are made once per connection, under this function's
-- planner settings (the probe must walk the partition-head index whatever the statistics say).
-- Returns the new ids ascending, or NULL (nothing locked, nothing written) outside READ COMMITTED.
create or replace function "vpc"."fga_register_outbox_enqueue"(p_keys text[], p_payloads jsonb[], p_max_attempts integer)
returns bigint[]
language plpgsql volatile
set plan_cache_mode = force_generic_plan set enable_sort = off set enable_seqscan = off set jit = off
as $fn$
-- @outbox/outbox enqueue v1 vpc.fga_register_outbox resource_id
declare
  v_max integer;
  v_ids bigint[];
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    return null;
  end if;
  -- In hash order, as the settle and the reconciler take them: no deadlock between them.
  perform pg_advisory_xact_lock(l.h)
    from (select distinct hashtextextended('vpc.fga_register_outbox' || ' ' || k, 0) as h from unnest(p_keys) as k) l
    order by l.h;
  -- The table's recorded maxAttempts, else the caller's spec.
  v_max := coalesce((
    select substring(col_description(a.attrelid, a.attnum) from '@outbox/outbox max_attempts=([0-9]+)')::integer
    from pg_catalog.pg_attribute a
    where a.attrelid = '"vpc"."fga_register_outbox"'::regclass and a.attname = 'attempt_count' and not a.attisdropped), p_max_attempts);
  -- The first new row of each key is head unless the key has a deliverable row: one probe per key
  -- (a LATERAL with LIMIT 1; an EXISTS may be planned as a hash over every pending row).
  with inserted as (
    insert into "vpc"."fga_register_outbox" ("resource_id", payload, is_head)
    select u.k, u.p, u.first and live.found is null
    from (
      select w.k, w.p, w.ord, row_number() over (partition by w.k order by w.ord) = 1 as first
      from unnest(p_keys, p_payloads) with ordinality as w(k, p, ord)
    ) u
    left join lateral (
      select true as found from "vpc"."fga_register_outbox" x
      where u.first
        and (x."resource_id", x.id) >= (u.k, '-9223372036854775808'::bigint) and (x."resource_id", x.id) <= (u.k, 9223372036854775807)
        and x.sent_at is null and x.retired_at is null and x.attempt_count < v_max
      order by x."resource_id", x.id
      limit 1
    ) live on true
    order by u.ord
    returning id
  )
  select coalesce(array_agg(i.id order by i.id), '{}') into v_ids from inserted i;
  return v_ids;
end
$fn$
;

-- ==== actionsLogDdlV1

create table "vpc"."fga_register_outbox_actions" (
      id     bigint generated always as identity primary key,
      at     timestamptz not null default now(),
      actor  text not null,
      action text not null,
      ids    jsonb not null default '[]',
      counts jsonb not null default '{}',
      reason text,
      constraint "fga_register_outbox_actions_actor_check" check (btrim(actor) <> '' and actor !~ '[[:cntrl:]]'),
      constraint "fga_register_outbox_actions_action_check" check (action in ('redrive', 'retire', 'discard', 'repair', 'compact')),
      constraint "fga_register_outbox_actions_reason_check" check (action not in ('retire', 'discard') or coalesce(btrim(reason), '') <> ''),
      constraint "fga_register_outbox_actions_ids_check" check (jsonb_typeof(ids) = 'array'),
      constraint "fga_register_outbox_actions_counts_check" check (jsonb_typeof(counts) = 'object')
    );

comment on table "vpc"."fga_register_outbox_actions" is 'operator actions that changed vpc.fga_register_outbox: who, what, which ids, how many, why (@outbox/outbox actions log v1 vpc.fga_register_outbox)';
