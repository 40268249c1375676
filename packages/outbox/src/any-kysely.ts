import type { Kysely } from 'kysely';

/**
 * A Kysely or transaction over any database: the outbox runs only its own SQL, and `Kysely<unknown>`
 * would refuse the caller's `Kysely<MyDatabase>` (Kysely is invariant in it).
 * @example
 * export const up = (db: AnyKysely) => createOutboxTable(db, vpcOutbox);
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyKysely = Kysely<any>;
