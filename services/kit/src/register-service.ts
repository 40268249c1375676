import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { ResourceColumn, ResourceTable } from '@outbox/migrations';
import { enqueue, REGISTER_OUTBOX_PARTITION, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import { findById } from './find-by-id.js';
import { ID_FIELD, ID_PATTERN, NAME_FIELD, validateBody, type FieldRule, type FieldRules } from './body-schema.js';
import { HttpError, ServiceConfigError } from './errors.js';
import type { Route, ServiceRequest } from './http-server.js';
// The create path and the audit's owner mapping build the tuples with the same functions.
import { registerServiceOwner, registrationTuples, resourceObject } from './register-owner.js';
import type { ServiceContext, ServiceDefinition } from './service.js';
import { resourceTableColumns } from './verify-tables.js';
import { writeAnswer } from './write-answer.js';

/** What makes a register service that service: its table, its OpenFGA type, its outbox and its fields. */
export interface RegisterServiceConfig<N extends string, C extends Readonly<Record<string, ResourceColumn>>> {
  /** E.g. `vpc`. */
  readonly name: N;
  /** The port its process listens on by default. */
  readonly defaultPort: number;
  /** The resource table (from @outbox/migrations), whose migration created it. */
  readonly resourceTable: ResourceTable<C>;
  /** The OpenFGA type of a resource, e.g. `vpc`: a resource is the object `<fgaType>:<id>`. */
  readonly fgaType: string;
  /** The outbox spec (from @outbox/migrations): a register-outbox keyed on `resource_id`. */
  readonly outboxSpec: OutboxSpec;
  /** The collection's path segment, e.g. `vpcs` for `POST /vpcs`. Default: the table's name. */
  readonly path?: string;
  /** Validation of the service's own columns (`project_id` and `name` are common to all). */
  readonly fields: FieldRules<C>;
}

/** A register service's definition, with what a client needs to call it. */
export interface RegisterServiceDefinition<N extends string = string> extends ServiceDefinition<N> {
  /** The OpenFGA type of its resources, e.g. `vpc`. */
  readonly fgaType: string;
  /** The collection path, e.g. `/vpcs`. */
  readonly resourcePath: string;
  readonly resourceTable: ResourceTable;
}

/** A row of any resource table: the common columns, then the service's own. */
type ResourceRow = Record<string, unknown> & { id: string; project_id: string; created_by: string };

/**
 * Builds a register service (vpc, compute, nlb, storage, registry) from its table, type, outbox and
 * fields. Its API, all answering JSON and naming the caller with the `x-user-id` header:
 *
 * - `POST /<path>` `{ project_id, name, ...fields }` — needs `can_edit` on the project. Writes the row
 *   and its register intent (tuples `project:<p> project <obj>`, `user:<caller> owner <obj>`) in one
 *   transaction, then awaits their delivery: 201, or 202 with a `note` when delivery is pending.
 * - `GET /<path>/:id` — needs `can_view`: 200, 403, or 404 for an unknown id.
 * - `GET /<path>[?project_id=]` — the resources the caller can view (OpenFGA `listObjects`).
 * - `DELETE /<path>/:id` — needs `can_delete`. Deletes the row and enqueues the deletion of the same
 *   tuples in one transaction: 204, or 202 with a `note`.
 *
 * @example
 * export const vpcService = createRegisterService({
 *   name: 'vpc', defaultPort: 3001, resourceTable: vpcTable, fgaType: 'vpc', outboxSpec: vpcOutbox,
 *   fields: { cidr_block: { type: 'string', description: 'an IPv4 CIDR block', validate: cidrProblem } },
 * });
 */
export function createRegisterService<const N extends string, C extends Readonly<Record<string, ResourceColumn>>>(
  config: RegisterServiceConfig<N, C>,
): RegisterServiceDefinition<N> {
  const { resourceTable: table, fgaType, outboxSpec: spec } = config;
  if (spec.partitionColumn !== REGISTER_OUTBOX_PARTITION) {
    throw new ServiceConfigError('outboxSpec', `${config.name} needs a register-outbox (partition ${REGISTER_OUTBOX_PARTITION}); ${spec.table} is keyed on ${spec.partitionColumn}`);
  }
  const path = `/${config.path ?? table.table}`;
  const rules: Record<string, FieldRule> = { project_id: ID_FIELD, name: NAME_FIELD, ...(config.fields as Record<string, FieldRule>) };
  const objectOf = (id: string) => resourceObject(fgaType, id);

  return {
    name: config.name,
    defaultPort: config.defaultPort,
    outbox: spec,
    owner: registerServiceOwner({ fgaType, resourceTable: table }),
    tables: [resourceTableColumns(table)],
    fgaType,
    resourcePath: path,
    resourceTable: table,
    routes(ctx: ServiceContext): Route[] {
      const { db, authorizer, outbox } = ctx;
      const rows = () => db.selectFrom(table.qualifiedName).selectAll();

      const find = (request: ServiceRequest) => findById<ResourceRow>(db, table.qualifiedName, request, fgaType);

      return [
        {
          method: 'POST',
          path,
          async handle(request) {
            const caller = request.caller();
            const values = validateBody(request.body, rules);
            const projectId = values.project_id as string;
            await authorizer.require(`user:${caller}`, 'can_edit', `project:${projectId}`);
            const id = randomUUID();
            const object = objectOf(id);
            const payload: IntentPayload = { writes: registrationTuples(object, projectId, caller) };
            const row = await db.transaction().execute(async (trx) => {
              const inserted = await trx
                .insertInto(table.qualifiedName)
                .values({ ...values, id, created_by: caller })
                .returningAll()
                .executeTakeFirstOrThrow();
              await enqueue(trx, spec, { partitionKey: object, payload });
              return inserted;
            });
            return writeAnswer(row, await outbox.settle(object), 201);
          },
        },
        {
          method: 'GET',
          path: `${path}/:id`,
          async handle(request) {
            const caller = request.caller();
            const row = await find(request);
            await authorizer.require(`user:${caller}`, 'can_view', objectOf(row.id));
            return { status: 200, body: row };
          },
        },
        {
          method: 'GET',
          path,
          async handle(request) {
            const caller = request.caller();
            const projectId = request.query.get('project_id');
            if (projectId !== null && !ID_PATTERN.test(projectId)) throw new HttpError(400, 'invalid_query', `project_id: expected ${ID_FIELD.description}`);
            const ids = await authorizer.listObjectIds(`user:${caller}`, 'can_view', fgaType);
            if (ids.length === 0) return { status: 200, body: { items: [] } };
            // One array parameter, not one per id: a long list stays one small statement.
            let query = rows().where(sql<boolean>`id = any(${ids}::text[])`);
            if (projectId !== null) query = query.where('project_id', '=', projectId);
            const items = await query.orderBy('created_at').orderBy('id').execute();
            return { status: 200, body: { items } };
          },
        },
        {
          method: 'DELETE',
          path: `${path}/:id`,
          async handle(request) {
            const caller = request.caller();
            const found = await find(request);
            const object = objectOf(found.id);
            // The resource's own tuples may not be in OpenFGA (its register intent pending, or
            // poisoned): the project on the row is the durable fact, and the model lets a project
            // owner delete its resources, so that path is checked on the project itself.
            const user = `user:${caller}`;
            const allowed =
              (await authorizer.check(user, 'can_delete', object)) ||
              (await authorizer.check(user, 'can_delete', `project:${found.project_id}`));
            if (!allowed) throw new HttpError(403, 'forbidden', `${user} is not allowed can_delete on ${object}`);
            const deleted = await db.transaction().execute(async (trx) => {
              const row = await trx.deleteFrom(table.qualifiedName).where('id', '=', found.id).returningAll().executeTakeFirst();
              // Deleted meanwhile by someone else, whose transaction enqueued the deregistration.
              if (!row) return undefined;
              // The tuples the registration wrote: the owner is the creator, not necessarily the caller.
              await enqueue(trx, spec, { partitionKey: object, payload: { deletes: registrationTuples(object, row.project_id, row.created_by) } });
              return row;
            });
            if (!deleted) throw new HttpError(404, 'not_found', `no ${fgaType} ${JSON.stringify(found.id)}`);
            const delivery = await outbox.settle(object);
            return delivery.status === 'delivered' ? { status: 204 } : { status: 202, body: { id: found.id, deleted: true, note: delivery.note } };
          },
        },
      ];
    },
  };
}
