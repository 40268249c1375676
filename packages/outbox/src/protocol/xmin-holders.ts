/**
 * The transactions that keep vacuum from removing the row versions this database's transactions
 * deleted (a delivered row's old version, whose entry stays at the left edge of the claim index), one
 * row each with when it started (`since`): a session of this database holding a snapshot
 * (`backend_xmin`: REPEATABLE READ or SERIALIZABLE idle in transaction, an open cursor, a long
 * statement); a session of any database holding a transaction id (it wrote), which every snapshot
 * taken here counts as still running; a prepared transaction (`gid`). The reading session is not
 * one. Other roles' sessions show only to a role with pg_read_all_stats (pg_monitor); prepared
 * transactions to every role. Replication slots and standbys' feedback, which can hold vacuum back
 * too, are not here (pg_replication_slots).
 */
export const XMIN_HOLDERS_SQL = `
  select pid, application_name, state, datname::text as database, xact_start as since, null::text as gid
  from pg_catalog.pg_stat_activity
  where pid <> pg_backend_pid() and xact_start is not null
    and (backend_xid is not null or (backend_xmin is not null and datname = current_database()))
  union all
  select null, null, 'prepared', database::text, prepared, gid from pg_catalog.pg_prepared_xacts`;
