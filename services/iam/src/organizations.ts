import { randomUUID } from 'node:crypto';
import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import {
  ERROR_RESPONSES,
  findById,
  NAME_FIELD,
  TIMESTAMP,
  writeAnswer,
  writeResponses,
  type ServiceApp,
  type ServiceContext,
} from '@outbox/service-kit';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { organizationOwnerTuple } from './iam-owner.js';

const ORGANIZATION = { id: Type.String(), name: Type.String(), created_by: Type.String(), created_at: TIMESTAMP };
const tags = ['organization'];

/**
 * `POST /organizations` `{ name }`: anyone may create one and becomes its owner (tuple
 * `user:<caller> owner organization:<id>`). `GET /organizations/:id`: members only.
 */
export function organizationRoutes(app: ServiceApp, ctx: ServiceContext): void {
  const db = ctx.db as Kysely<IamDatabase>;
  app.post(
    '/organizations',
    {
      schema: {
        summary: 'Create an organization (the caller becomes its owner)',
        tags,
        body: Type.Object({ name: NAME_FIELD }, { additionalProperties: false }),
        response: writeResponses(201, ORGANIZATION, 'the organization'),
      },
    },
    async (request, reply) => {
      const { caller } = request;
      const { name } = request.body;
      const id = randomUUID();
      // The audit's owner mapping expects the same tuple of the row (iam-owner.ts).
      const tuple = organizationOwnerTuple(id, caller);
      const partitionKey = grantTupleKey(tuple.user, tuple.object);
      const { row, intent } = await db.transaction().execute(async (trx) => {
        const inserted = await trx
          .insertInto('iam.organizations')
          .values({ id, name, created_by: caller })
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
    '/organizations/:id',
    {
      schema: {
        summary: 'Read an organization (members only)',
        tags,
        params: Type.Object({ id: Type.String() }),
        response: { 200: Type.Object(ORGANIZATION), ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const row = await findById<{ id: string; name: string; created_by: string; created_at: Date }>(
        db,
        'iam.organizations',
        request.params.id,
        'organization',
      );
      await request.authorizer.require(`user:${request.caller}`, 'member', `organization:${row.id}`);
      return row;
    },
  );
}
