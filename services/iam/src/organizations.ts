import { randomUUID } from 'node:crypto';
import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import { findById, NAME_FIELD, validateBody, writeAnswer, type Route, type ServiceContext } from '@outbox/service-kit';
import type { Kysely } from 'kysely';
import { organizationOwnerTuple } from './iam-owner.js';

/**
 * `POST /organizations` `{ name }`: anyone may create one and becomes its owner (tuple
 * `user:<caller> owner organization:<id>`). `GET /organizations/:id`: members only.
 */
export function organizationRoutes(ctx: ServiceContext): Route[] {
  const db = ctx.db as Kysely<IamDatabase>;
  return [
    {
      method: 'POST',
      path: '/organizations',
      async handle(request) {
        const caller = request.caller();
        const { name } = validateBody(request.body, { name: NAME_FIELD }) as { name: string };
        const id = randomUUID();
        // The audit's owner mapping expects the same tuple of the row (iam-owner.ts).
        const tuple = organizationOwnerTuple(id, caller);
        const partitionKey = grantTupleKey(tuple.user, tuple.object);
        const row = await db.transaction().execute(async (trx) => {
          const inserted = await trx.insertInto('iam.organizations').values({ id, name, created_by: caller }).returningAll().executeTakeFirstOrThrow();
          await enqueue(trx, iamOutbox, { partitionKey, payload: { writes: [tuple], relations: [tuple.relation] } });
          return inserted;
        });
        return writeAnswer(row, await ctx.outbox.settle(partitionKey), 201);
      },
    },
    {
      method: 'GET',
      path: '/organizations/:id',
      async handle(request) {
        const caller = request.caller();
        const row = await findById<{ id: string }>(db, 'iam.organizations', request, 'organization');
        await ctx.authorizer.require(`user:${caller}`, 'member', `organization:${row.id}`);
        return { status: 200, body: row };
      },
    },
  ];
}
