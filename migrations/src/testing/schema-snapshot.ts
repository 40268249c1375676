// What the migrations created, read from the catalog, for tests that compare two databases. Test-only.
import { sql, type RawBuilder } from 'kysely';
import type { AnyKysely } from '@outbox/outbox';

/**
 * Everything a migration can create in `schemas`, as plain rows that `toEqual` compares: relations
 * with their reloptions and comments, columns (types, NOT NULL, identity, defaults, comments),
 * indexes, constraints, functions (their whole definition: signature, SET clauses, body), triggers.
 */
export async function schemaSnapshot(db: AnyKysely, schemas: readonly string[]) {
  const list = [...schemas];
  const rows = async <R>(query: RawBuilder<R>) => (await query.execute(db)).rows;
  return {
    relations: await rows(sql<Record<string, unknown>>`
      select n.nspname as schema, c.relname as name, c.relkind as kind, c.reloptions as options,
             obj_description(c.oid, 'pg_class') as comment
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any(${list}::text[]) order by 1, 2`),
    columns: await rows(sql<Record<string, unknown>>`
      select n.nspname as schema, c.relname as relation, a.attnum as position, a.attname as name,
             format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null, a.attidentity as identity,
             pg_get_expr(d.adbin, d.adrelid) as default, col_description(c.oid, a.attnum) as comment
      from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
      left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where n.nspname = any(${list}::text[]) and a.attnum > 0 and not a.attisdropped order by 1, 2, 3`),
    indexes: await rows(sql<Record<string, unknown>>`
      select schemaname as schema, indexname as name, indexdef as definition
      from pg_indexes where schemaname = any(${list}::text[]) order by 1, 2`),
    constraints: await rows(sql<Record<string, unknown>>`
      select n.nspname as schema, c.conname as name, pg_get_constraintdef(c.oid) as definition
      from pg_constraint c join pg_namespace n on n.oid = c.connamespace
      where n.nspname = any(${list}::text[]) order by 1, 2`),
    functions: await rows(sql<{ schema: string; name: string; arguments: string; definition: string }>`
      select n.nspname as schema, p.proname as name, pg_get_function_identity_arguments(p.oid) as arguments,
             pg_get_functiondef(p.oid) as definition
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = any(${list}::text[]) order by 1, 2, 3`),
    triggers: await rows(sql<Record<string, unknown>>`
      select n.nspname as schema, t.tgname as name, t.tgenabled as enabled, pg_get_triggerdef(t.oid) as definition
      from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any(${list}::text[]) and not t.tgisinternal order by 1, 2`),
  };
}
