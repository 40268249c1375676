import { randomUUID } from 'node:crypto';
import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import {
  ERROR_RESPONSES,
  findById,
  HttpError,
  ID_FIELD,
  NAME_FIELD,
  TIMESTAMP,
  writeAnswer,
  writeResponses,
  type ServiceApp,
  type ServiceContext,
} from '@outbox/service-kit';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { projectOrganizationTuple } from './iam-owner.js';

const PROJECT = {
  id: Type.String(),
  organization_id: Type.String(),
  name: Type.String(),
  created_by: Type.String(),
  created_at: TIMESTAMP,
};
const tags = ['project'];

/**
 * `POST /projects` `{ organization_id, name }`: an admin (or owner) of the organization creates a
 * project in it (tuple `organization:<org> organization project:<id>`; the organization's admins
 * are its owners through the model). `GET /projects/:id`: `can_view` on the project.
 */
export function projectRoutes(app: ServiceApp, ctx: ServiceContext): void {
  const db = ctx.db as Kysely<IamDatabase>;
  app.post(
    '/projects',
    {
      schema: {
        summary: 'Create a project in an organization (needs admin on it)',
        tags,
        body: Type.Object({ organization_id: ID_FIELD, name: NAME_FIELD }, { additionalProperties: false }),
        response: writeResponses(201, PROJECT, 'the project'),
      },
    },
    async (request, reply) => {
      const { caller, body } = request;
      const organization = await db
        .selectFrom('iam.organizations')
        .select('id')
        .where('id', '=', body.organization_id)
        .executeTakeFirst();
      if (!organization)
        throw new HttpError(404, 'not_found', `no organization ${JSON.stringify(body.organization_id)}`);
      await request.authorizer.require(`user:${caller}`, 'admin', `organization:${organization.id}`);
      const id = randomUUID();
      // The audit's owner mapping expects the same tuple of the row (iam-owner.ts).
      const tuple = projectOrganizationTuple(id, organization.id);
      const partitionKey = grantTupleKey(tuple.user, tuple.object);
      const { row, intent } = await db.transaction().execute(async (trx) => {
        const inserted = await trx
          .insertInto('iam.projects')
          .values({ id, organization_id: organization.id, name: body.name, created_by: caller })
          .returningAll()
          .executeTakeFirstOrThrow();
        return {
          row: inserted,
          intent: await enqueue(trx, iamOutbox, {
            partitionKey,
            payload: { writes: [tuple], relations: [tuple.relation] },
          }),
        };
      });
      return writeAnswer(reply, row, await ctx.outbox.settle(partitionKey, [intent]), 201);
    },
  );
  app.get(
    '/projects/:id',
    {
      schema: {
        summary: 'Read a project (needs can_view)',
        tags,
        params: Type.Object({ id: Type.String() }),
        response: { 200: Type.Object(PROJECT), ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const row = await findById<{
        id: string;
        organization_id: string;
        name: string;
        created_by: string;
        created_at: Date;
      }>(db, 'iam.projects', request.params.id, 'project');
      await request.authorizer.require(`user:${request.caller}`, 'can_view', `project:${row.id}`);
      return row;
    },
  );
}
