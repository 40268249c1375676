import type { Kysely } from 'kysely';

/**
 * A Kysely instance or transaction over any database type. The outbox only runs its own SQL, so
 * it accepts the caller's `Kysely<MyDatabase>` whatever `MyDatabase` is; `Kysely<unknown>` would
 * not accept it (Kysely is invariant in its database type).
 *
 * @example
 * export async function up(db: AnyKysely): Promise<void> { await createOutboxTable(db, vpcOutbox); }
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyKysely = Kysely<any>;
