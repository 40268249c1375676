import { grantTupleKey, iamOutbox, type IamDatabase } from '@outbox/migrations';
import { enqueue } from '@outbox/outbox';
import { findById, HttpError, ID_DESCRIPTION, ID_PATTERN, shownValue, writeAnswer, type Route, type ServiceContext, type ServiceRequest } from '@outbox/service-kit';
import { sql, type Kysely } from 'kysely';
import { grantIntent, relationsProblem, type GrantableRelation } from './grant-intent.js';

/** The relation set of a PUT body, or a 400 saying what is wrong with it. */
function grantBody(body: unknown): GrantableRelation[] {
  let problem: string | undefined;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) problem = 'expected a JSON object { relations: [...] }';
  else {
    const extra = Object.keys(body).filter((k) => k !== 'relations');
    problem = extra.length > 0 ? `unknown field(s) ${extra.slice(0, 3).map((k) => (k.length > 80 ? shownValue(k) : k)).join(', ')}${extra.length > 3 ? ` and ${extra.length - 3} more` : ''} (expected relations)` : relationsProblem((body as { relations?: unknown }).relations);
  }
  if (problem) throw new HttpError(400, 'invalid_body', `invalid request body: ${problem}`);
  return (body as { relations: GrantableRelation[] }).relations;
}

/**
 * `PUT /projects/:id/grants/:user` `{ relations: [...] }` sets the relations `:user` holds directly
 * on the project (`[]` revokes them all); only an owner of the project may. `GET
 * /projects/:id/grants` lists the direct grants (`can_view`).
 *
 * The PUT locks the grant's row, reads the previous set (for the answer), writes the new one and
 * enqueues the grant's whole new state (see `grantIntent`) in one transaction, so two PUTs for one
 * grant serialise and their intents are delivered in commit order.
 */
export function grantRoutes(ctx: ServiceContext): Route[] {
  const db = ctx.db as Kysely<IamDatabase>;

  async function project(request: ServiceRequest): Promise<string> {
    return (await findById<{ id: string }>(db, 'iam.projects', request, 'project')).id;
  }

  return [
    {
      method: 'PUT',
      path: '/projects/:id/grants/:user',
      async handle(request) {
        const caller = request.caller();
        const projectId = await project(request);
        const userId = request.params.user ?? '';
        if (!ID_PATTERN.test(userId)) throw new HttpError(400, 'invalid_user', `the user in the path should be ${ID_DESCRIPTION}`);
        const next = grantBody(request.body);
        await ctx.authorizer.require(`user:${caller}`, 'owner', `project:${projectId}`);

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
            .onConflict((c) => c.columns(['project_id', 'user_id']).doUpdateSet({ relations: sql`iam.project_grants.relations` }))
            .returning('relations')
            .executeTakeFirstOrThrow();
          const intent = grantIntent(user, object, current.relations, next);
          if (next.length === 0) {
            await trx.deleteFrom('iam.project_grants').where('project_id', '=', projectId).where('user_id', '=', userId).execute();
          } else {
            await trx
              .updateTable('iam.project_grants')
              .set({ relations: intent.payload.relations as string[], updated_at: sql`now()` })
              .where('project_id', '=', projectId)
              .where('user_id', '=', userId)
              .execute();
          }
          await enqueue(trx, iamOutbox, { partitionKey, payload: intent.payload });
          return { previous: current.relations, intent };
        });
        const grant = {
          project_id: projectId,
          user_id: userId,
          relations: result.intent.payload.relations,
          previous: result.previous,
          written: result.intent.written,
          deleted: result.intent.deleted,
          changed: result.intent.changed,
        };
        return writeAnswer(grant, await ctx.outbox.settle(partitionKey), 200);
      },
    },
    {
      method: 'GET',
      path: '/projects/:id/grants',
      async handle(request) {
        const caller = request.caller();
        const projectId = await project(request);
        await ctx.authorizer.require(`user:${caller}`, 'can_view', `project:${projectId}`);
        const items = await db
          .selectFrom('iam.project_grants')
          .select(['user_id', 'relations', 'updated_at'])
          .where('project_id', '=', projectId)
          .orderBy('user_id')
          .execute();
        return { status: 200, body: { items } };
      },
    },
  ];
}
