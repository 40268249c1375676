import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { ResourceColumn, ResourceTable } from '@outbox/migrations';
import { enqueue, REGISTER_OUTBOX_PARTITION, type IntentPayload, type OutboxSpec } from '@outbox/outbox';
import { Type, type TSchema } from 'typebox';
import { HttpError, ServiceConfigError } from './errors.js';
import { ID_FIELD, NAME_FIELD, type FieldSchemas, type FormatCheck } from './field-schemas.js';
import { findById } from './find-by-id.js';
// The create path and the audit's owner mapping build the tuples with the same functions.
import { registerServiceOwner, registrationTuples, resourceObject } from './register-owner.js';
import { ERROR_RESPONSES, TIMESTAMP, writeResponses } from './response-schemas.js';
import type { ServiceContext, ServiceDefinition } from './service.js';
import { resourceTableColumns } from './verify-tables.js';
import { tokenHeader, writeAnswer } from './write-answer.js';

/** What makes a register service that service: its table, its OpenFGA type, its outbox and its fields. */
export interface RegisterServiceConfig<
  N extends string,
  C extends Readonly<Record<string, ResourceColumn>>,
  F extends { readonly [K in keyof C]: TSchema },
> {
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
  /**
   * A TypeBox schema per own column (`project_id` and `name` are common to all), checked against the
   * column's type. Give each string a `pattern`, an enum or a `format`: the value is stored as sent.
   * A `default` fills an absent field.
   */
  readonly fields: F & FieldSchemas<C, F>;
  /** The checks behind custom `format`s the fields use (e.g. `{ 'ipv4-cidr-block': cidrProblem }`). */
  readonly formats?: Readonly<Record<string, FormatCheck>>;
  /**
   * Fields that name another service's resource, and what the caller needs on it to create one
   * here: `{ vpc_id: { fgaType: 'vpc', relation: 'can_edit' } }` checks `can_edit` on `vpc:<vpc_id>`
   * when a create gives `vpc_id`. Checked as every check is, so an `Outbox-Consistency` token from
   * the other service's write makes the create wait for that resource's tuples.
   */
  readonly references?: { readonly [K in keyof C]?: ResourceReference };
}

/** What a field naming another service's resource requires of the caller ({@link RegisterServiceConfig.references}). */
export interface ResourceReference {
  /** The OpenFGA type the field's value is an id of, e.g. `vpc`. */
  readonly fgaType: string;
  /** The relation the caller needs on it, e.g. `can_edit`. */
  readonly relation: string;
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
type ResourceRow = Record<string, unknown> & {
  id: string;
  project_id: string;
  name: string;
  created_by: string;
  created_at: Date | string;
};

const ID_PARAMS = Type.Object({ id: Type.String({ description: 'the resource id' }) });

const COLUMN_SCHEMAS = { text: Type.String, integer: Type.Integer, boolean: Type.Boolean } as const;

/** A row's nullable columns as an answer shows them: the value, or null where a create gave none. */
function nullableColumns(table: ResourceTable): Record<string, TSchema> {
  return Object.fromEntries(
    Object.entries(table.columns)
      .filter(([, column]) => column.nullable)
      .map(([name, column]) => [name, Type.Union([COLUMN_SCHEMAS[column.type](), Type.Null()])]),
  );
}

/**
 * Builds a register service (vpc, compute, nlb, storage, registry) from its table, type, outbox and
 * fields. Its API, all answering JSON and naming the caller with the `x-user-id` header:
 *
 * - `POST /<path>` `{ project_id, name, ...fields }` — needs `can_edit` on the project (and what
 *   `references` asks on the resources the fields name). Writes the row
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
 *   fields: { cidr_block: Type.String({ description: 'an IPv4 CIDR block', format: 'ipv4-cidr-block' }) },
 *   formats: { 'ipv4-cidr-block': cidrProblem },
 * });
 */
export function createRegisterService<
  const N extends string,
  C extends Readonly<Record<string, ResourceColumn>>,
  F extends { readonly [K in keyof C]: TSchema },
>(config: RegisterServiceConfig<N, C, F>): RegisterServiceDefinition<N> {
  const { resourceTable: table, fgaType, outboxSpec: spec } = config;
  if (spec.partitionColumn !== REGISTER_OUTBOX_PARTITION) {
    throw new ServiceConfigError(
      'outboxSpec',
      `${config.name} needs a register-outbox (partition ${REGISTER_OUTBOX_PARTITION}); ${spec.table} is keyed on ${spec.partitionColumn}`,
    );
  }
  const path = `/${config.path ?? table.table}`;
  const fields = config.fields as Readonly<Record<string, TSchema>>;
  const body = Type.Object({ project_id: ID_FIELD, name: NAME_FIELD, ...fields }, { additionalProperties: false });
  const row = Type.Object({
    id: Type.String(),
    project_id: Type.String(),
    name: Type.String(),
    created_by: Type.String(),
    created_at: TIMESTAMP,
    ...fields,
    ...nullableColumns(table),
  });
  const tags = [fgaType];
  const objectOf = (id: string) => resourceObject(fgaType, id);
  const references = Object.entries((config.references ?? {}) as Readonly<Record<string, ResourceReference>>);
  for (const [field] of references) {
    if (!(field in fields)) throw new ServiceConfigError(`references.${field}`, `${field} is not one of the fields`);
  }
  const referenced = references.map(([field, r]) => ` and ${r.relation} on the ${r.fgaType} its ${field} names`);

  return {
    name: config.name,
    defaultPort: config.defaultPort,
    outbox: spec,
    owner: registerServiceOwner({ fgaType, resourceTable: table }),
    tables: [resourceTableColumns(table)],
    ...(config.formats ? { formats: config.formats } : {}),
    fgaType,
    resourcePath: path,
    resourceTable: table,
    routes(app, ctx: ServiceContext) {
      const { db, outbox } = ctx;
      const find = (id: string) => findById<ResourceRow>(db, table.qualifiedName, id, fgaType);

      app.post(
        path,
        {
          schema: {
            summary: `Create a ${fgaType} (needs can_edit on the project${referenced.join('')})`,
            tags,
            body,
            response: writeResponses(201, row.properties, `the ${fgaType}`),
          },
        },
        async (request, reply) => {
          const { caller } = request;
          const values = request.body as Record<string, unknown> & { project_id: string };
          await request.authorizer.require(`user:${caller}`, 'can_edit', `project:${values.project_id}`);
          for (const [field, reference] of references) {
            const value = values[field];
            if (typeof value === 'string')
              await request.authorizer.require(
                `user:${caller}`,
                reference.relation,
                resourceObject(reference.fgaType, value),
              );
          }
          const id = randomUUID();
          const object = objectOf(id);
          const payload: IntentPayload = { writes: registrationTuples(object, values.project_id, caller) };
          const { inserted, intent } = await db.transaction().execute(async (trx) => {
            const created = await trx
              .insertInto(table.qualifiedName)
              .values({ ...values, id, created_by: caller })
              .returningAll()
              .executeTakeFirstOrThrow();
            return {
              inserted: created as ResourceRow,
              intent: await enqueue(trx, spec, { partitionKey: object, payload }),
            };
          });
          return writeAnswer(reply, inserted, await outbox.settle(object, [intent]), 201);
        },
      );

      app.get(
        `${path}/:id`,
        {
          schema: {
            summary: `Read a ${fgaType} (needs can_view)`,
            tags,
            params: ID_PARAMS,
            response: { 200: row, ...ERROR_RESPONSES },
          },
        },
        async (request) => {
          const found = await find(request.params.id);
          await request.authorizer.require(`user:${request.caller}`, 'can_view', objectOf(found.id));
          return found;
        },
      );

      app.get(
        path,
        {
          schema: {
            summary: `List the ${fgaType}s the caller can view`,
            tags,
            querystring: Type.Object({ project_id: Type.Optional(ID_FIELD) }),
            response: { 200: Type.Object({ items: Type.Array(row) }), ...ERROR_RESPONSES },
          },
        },
        async (request) => {
          const projectId = request.query.project_id;
          const ids = await request.authorizer.listObjectIds(`user:${request.caller}`, 'can_view', fgaType);
          if (ids.length === 0) return { items: [] };
          // One array parameter, not one per id: a long list stays one small statement.
          let query = db
            .selectFrom(table.qualifiedName)
            .selectAll()
            .where(sql<boolean>`id = any(${ids}::text[])`);
          if (projectId !== undefined) query = query.where('project_id', '=', projectId);
          return { items: (await query.orderBy('created_at').orderBy('id').execute()) as ResourceRow[] };
        },
      );

      app.delete(
        `${path}/:id`,
        {
          schema: {
            summary: `Delete a ${fgaType} (needs can_delete)`,
            tags,
            params: ID_PARAMS,
            response: {
              204: Type.Null({ description: 'deleted, and its tuples gone from OpenFGA' }),
              202: Type.Object(
                { id: Type.String(), deleted: Type.Boolean(), note: Type.String() },
                { description: 'deleted; its tuples not yet gone from OpenFGA' },
              ),
              ...ERROR_RESPONSES,
            },
          },
        },
        async (request, reply) => {
          const found = await find(request.params.id);
          const object = objectOf(found.id);
          // The resource's own tuples may not be in OpenFGA (its register intent pending, or
          // poisoned): the project on the row is the durable fact, and the model lets a project
          // owner delete its resources, so that path is checked on the project itself.
          const user = `user:${request.caller}`;
          const allowed =
            (await request.authorizer.check(user, 'can_delete', object)) ||
            (await request.authorizer.check(user, 'can_delete', `project:${found.project_id}`));
          if (!allowed) throw new HttpError(403, 'forbidden', `${user} is not allowed can_delete on ${object}`);
          const deregistration = await db.transaction().execute(async (trx) => {
            const gone = await trx
              .deleteFrom(table.qualifiedName)
              .where('id', '=', found.id)
              .returningAll()
              .executeTakeFirst();
            // Deleted meanwhile by someone else, whose transaction enqueued the deregistration.
            if (!gone) return undefined;
            // The tuples the registration wrote: the owner is the creator, not necessarily the caller.
            return enqueue(trx, spec, {
              partitionKey: object,
              payload: { deletes: registrationTuples(object, gone.project_id, gone.created_by) },
            });
          });
          if (!deregistration) throw new HttpError(404, 'not_found', `no ${fgaType} ${JSON.stringify(found.id)}`);
          const delivery = await outbox.settle(object, [deregistration]);
          tokenHeader(reply, delivery);
          if (delivery.status === 'delivered') return reply.code(204).send(null);
          return reply.code(202).send({ id: found.id, deleted: true, note: delivery.note });
        },
      );
    },
  };
}
