import { ID_PATTERN } from './field-schemas.js';
import { HttpError } from './errors.js';
import type { AnyKysely } from '@outbox/outbox';

/**
 * The row of `table` whose id is `id` (a path parameter), or a 404 naming `what`. Unknown and
 * malformed ids look the same to the caller (a malformed one is never sent to the database).
 *
 * @example
 * const vpc = await findById<VpcRow>(db, 'vpc.vpcs', request.params.id, 'vpc');
 */
export async function findById<Row>(db: AnyKysely, table: string, id: string, what: string): Promise<Row> {
  const row = ID_PATTERN.test(id)
    ? await db.selectFrom(table).selectAll().where('id', '=', id).executeTakeFirst()
    : undefined;
  if (!row) throw new HttpError(404, 'not_found', `no ${what} ${JSON.stringify(id)}`);
  return row as Row;
}
