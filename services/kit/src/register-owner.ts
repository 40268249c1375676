import type { ResourceTable } from '@outbox/migrations';
import type { TupleKey } from '@outbox/outbox';
import type { OutboxOwner, OwnedPartition } from '@outbox/reconciler';
import { sql } from 'kysely';

/** The OpenFGA object of a register service's resource: `<fgaType>:<id>`, its register-outbox partition too. */
export function resourceObject(fgaType: string, id: string): string {
  return `${fgaType}:${id}`;
}

/** The tuples that make a resource reachable: its project, and its creator as owner. */
export function registrationTuples(object: string, projectId: string, owner: string): TupleKey[] {
  return [
    { user: `project:${projectId}`, relation: 'project', object },
    { user: `user:${owner}`, relation: 'owner', object },
  ];
}

/** The columns of a resource row the tuples are built from. */
interface RegisteredRow {
  readonly id: string;
  readonly project_id: string;
  readonly created_by: string;
}

/**
 * The owner mapping of a register service (vpc, compute, nlb, storage, registry), for the audit and
 * repair of @outbox/reconciler: its objects are `<fgaType>:<id>`, one partition each (the
 * register-outbox's `resource_id`), and a row expects exactly the {@link registrationTuples} its
 * create path enqueues. Built from the service's own definition, so the two cannot drift.
 *
 * @example
 * const owner = registerServiceOwner(vpcService);
 * const report = await auditOutbox({ db, spec: vpcService.outbox, owner, reader });
 */
export function registerServiceOwner(definition: {
  readonly fgaType: string;
  readonly resourceTable: ResourceTable;
}): OutboxOwner {
  const { fgaType, resourceTable } = definition;
  const prefix = resourceObject(fgaType, '');
  const partition = (row: RegisteredRow): OwnedPartition => {
    const object = resourceObject(fgaType, row.id);
    return {
      partitionKey: object,
      objectKnown: true,
      tuples: registrationTuples(object, row.project_id, row.created_by),
    };
  };
  const rows = (trx: Parameters<OutboxOwner['partitions']>[0]) =>
    trx.selectFrom(resourceTable.qualifiedName).select(['id', 'project_id', 'created_by']);

  return {
    objectTypes: [fgaType],
    partitionOf: (tuple) => tuple.object,
    partitionFilter: (partitionKey) => ({ object: partitionKey }),
    async expectedPage(trx, after, limit) {
      let query = rows(trx).orderBy('id').limit(limit);
      if (after !== undefined) query = query.where('id', '>', after);
      const found = (await query.execute()) as RegisteredRow[];
      // The partition key is the id behind one prefix: pages in id order are in partition-key order.
      return { partitions: found.map(partition), next: found.length === limit ? found.at(-1)?.id : undefined };
    },
    async partitions(trx, keys) {
      const ids = keys.filter((key) => key.startsWith(prefix)).map((key) => key.slice(prefix.length));
      const found =
        ids.length === 0
          ? []
          : ((await rows(trx)
              .where(sql<boolean>`id = any(${ids}::text[])`)
              .execute()) as RegisteredRow[]);
      const owned = new Map(found.map((row) => [resourceObject(fgaType, row.id), partition(row)]));
      return keys.map((key) => owned.get(key) ?? { partitionKey: key, objectKnown: false, tuples: [] });
    },
  };
}
