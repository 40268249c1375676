import { randomUUID } from 'node:crypto';
import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import { findById, HttpError, ID_FIELD, NAME_FIELD, validateBody, writeAnswer, type Route, type ServiceContext } from '@outbox/service-kit';
import type { Kysely } from 'kysely';
import { projectOrganizationTuple } from './iam-owner.js';

/**
 * `POST /projects` `{ organization_id, name }`: an admin (or owner) of the organization creates a
 * project in it (tuple `organization:<org> organization project:<id>`; the organization's admins
 * are its owners through the model). `GET /projects/:id`: `can_view` on the project.
 */
export function projectRoutes(ctx: ServiceContext): Route[] {
  const db = ctx.db as Kysely<IamDatabase>;
  return [
    {
      method: 'POST',
      path: '/projects',
      async handle(request) {
        const caller = request.caller();
        const body = validateBody(request.body, { organization_id: ID_FIELD, name: NAME_FIELD }) as { organization_id: string; name: string };
        const organization = await db.selectFrom('iam.organizations').select('id').where('id', '=', body.organization_id).executeTakeFirst();
        if (!organization) throw new HttpError(404, 'not_found', `no organization ${JSON.stringify(body.organization_id)}`);
        await ctx.authorizer.require(`user:${caller}`, 'admin', `organization:${organization.id}`);
        const id = randomUUID();
        // The audit's owner mapping expects the same tuple of the row (iam-owner.ts).
        const tuple = projectOrganizationTuple(id, organization.id);
        const partitionKey = grantTupleKey(tuple.user, tuple.object);
        const row = await db.transaction().execute(async (trx) => {
          const inserted = await trx
            .insertInto('iam.projects')
            .values({ id, organization_id: organization.id, name: body.name, created_by: caller })
            .returningAll()
            .executeTakeFirstOrThrow();
          await enqueue(trx, iamOutbox, { partitionKey, payload: { writes: [tuple], relations: [tuple.relation] } });
          return inserted;
        });
        return writeAnswer(row, await ctx.outbox.settle(partitionKey), 201);
      },
    },
    {
      method: 'GET',
      path: '/projects/:id',
      async handle(request) {
        const caller = request.caller();
        const row = await findById<{ id: string }>(db, 'iam.projects', request, 'project');
        await ctx.authorizer.require(`user:${caller}`, 'can_view', `project:${row.id}`);
        return { status: 200, body: row };
      },
    },
  ];
}
