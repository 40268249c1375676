import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import {
  ERROR_RESPONSES,
  findById,
  ID_FIELD,
  TIMESTAMP,
  writeAnswer,
  writeResponses,
  type ServiceApp,
  type ServiceContext,
} from '@outbox/service-kit';
import { sql, type Kysely } from 'kysely';
import { Type } from 'typebox';
import { GRANTABLE_RELATIONS, grantIntent } from './grant-intent.js';

/** The body of a grant PUT: the set of relations the user is to hold directly, distinct (`[]` revokes them all). */
export const GRANT_BODY = Type.Object(
  {
    relations: Type.Array(Type.Enum([...GRANTABLE_RELATIONS]), {
      uniqueItems: true,
      description: `the relations the user holds directly from now on: ${GRANTABLE_RELATIONS.join(', ')} (possibly none)`,
    }),
  },
  { additionalProperties: false },
);

const RELATIONS = Type.Array(Type.String());
const GRANT = {
  project_id: Type.String(),
  user_id: Type.String(),
  relations: RELATIONS,
  previous: RELATIONS,
  written: RELATIONS,
  deleted: RELATIONS,
  changed: Type.Boolean({
    description: 'whether the set differs from the previous one (the intent is the same either way)',
  }),
};
const tags = ['grant'];

/**
 * `PUT /projects/:id/grants/:user` `{ relations: [...] }` sets the relations `:user` holds directly
 * on the project (`[]` revokes them all); only an owner of the project may. `GET
 * /projects/:id/grants` lists the direct grants (`can_view`).
 *
 * The PUT locks the grant's row, reads the previous set (for the answer), writes the new one and
 * enqueues the grant's whole new state (see `grantIntent`) in one transaction, so two PUTs for one
 * grant serialise and their intents are delivered in commit order.
 */
export function grantRoutes(app: ServiceApp, ctx: ServiceContext): void {
  const db = ctx.db as Kysely<IamDatabase>;
  const project = async (id: string) => (await findById<{ id: string }>(db, 'iam.projects', id, 'project')).id;

  app.put(
    '/projects/:id/grants/:user',
    {
      schema: {
        summary: "Set the relations a user holds directly on a project (only the project's owners may)",
        tags,
        params: Type.Object({ id: Type.String({ description: 'the project' }), user: ID_FIELD }),
        body: GRANT_BODY,
        response: writeResponses(200, GRANT, 'the grant'),
      },
    },
    async (request, reply) => {
      const projectId = await project(request.params.id);
      const userId = request.params.user;
      const next = request.body.relations;
      await request.authorizer.require(`user:${request.caller}`, 'owner', `project:${projectId}`);

      const user = `user:${userId}`;
      const object = `project:${projectId}`;
      const partitionKey = grantTupleKey(user, object);
      const result = await db.transaction().execute(async (trx) => {
        // Insert the row or lock the existing one, in one statement: a concurrent PUT for this
        // grant waits here. (Insert-if-missing, then SELECT … FOR UPDATE, finds no row when a
        // concurrent revoke deletes it in between.) The no-op update returns the current set.
        const current = await trx
          .insertInto('iam.project_grants')
          .values({ project_id: projectId, user_id: userId, relations: [] })
          .onConflict((c) =>
            c.columns(['project_id', 'user_id']).doUpdateSet({ relations: sql`iam.project_grants.relations` }),
          )
          .returning('relations')
          .executeTakeFirstOrThrow();
        const intent = grantIntent(user, object, current.relations, next);
        if (next.length === 0) {
          await trx
            .deleteFrom('iam.project_grants')
            .where('project_id', '=', projectId)
            .where('user_id', '=', userId)
            .execute();
        } else {
          await trx
            .updateTable('iam.project_grants')
            .set({ relations: intent.payload.relations as string[], updated_at: sql`now()` })
            .where('project_id', '=', projectId)
            .where('user_id', '=', userId)
            .execute();
        }
        const id = await enqueue(trx, iamOutbox, { partitionKey, payload: intent.payload });
        return { previous: current.relations, intent, id };
      });
      const grant = {
        project_id: projectId,
        user_id: userId,
        relations: [...result.intent.payload.relations],
        previous: result.previous,
        written: [...result.intent.written],
        deleted: [...result.intent.deleted],
        changed: result.intent.changed,
      };
      return writeAnswer(reply, grant, await ctx.outbox.settle(partitionKey, [result.id]), 200);
    },
  );
  app.get(
    '/projects/:id/grants',
    {
      schema: {
        summary: 'List the direct grants on a project (needs can_view)',
        tags,
        params: Type.Object({ id: Type.String({ description: 'the project' }) }),
        response: {
          200: Type.Object({
            items: Type.Array(Type.Object({ user_id: Type.String(), relations: RELATIONS, updated_at: TIMESTAMP })),
          }),
          ...ERROR_RESPONSES,
        },
      },
    },
    async (request) => {
      const projectId = await project(request.params.id);
      await request.authorizer.require(`user:${request.caller}`, 'can_view', `project:${projectId}`);
      const items = await db
        .selectFrom('iam.project_grants')
        .select(['user_id', 'relations', 'updated_at'])
        .where('project_id', '=', projectId)
        .orderBy('user_id')
        .execute();
      return { items };
    },
  );
}
