import { grantTupleKey, type IamDatabase } from '@outbox/migrations';
import { OutboxConfigError, type TupleKey } from '@outbox/outbox';
import type { OutboxOwner, OwnedPage, OwnedPartition, PartitionFilter } from '@outbox/reconciler';
import { sql, type Kysely } from 'kysely';
import { grantIntent, type GrantableRelation } from './grant-intent.js';

/** The tuple that makes an organization's creator its owner: what `POST /organizations` writes. */
export function organizationOwnerTuple(organizationId: string, createdBy: string): TupleKey {
  return { user: `user:${createdBy}`, relation: 'owner', object: `organization:${organizationId}` };
}

/** The tuple that puts a project in its organization: what `POST /projects` writes. */
export function projectOrganizationTuple(projectId: string, organizationId: string): TupleKey {
  return { user: `organization:${organizationId}`, relation: 'organization', object: `project:${projectId}` };
}

/** The tuples a grant row holds in OpenFGA: the writes of the whole-state intent its PUT enqueues. */
export function grantTuples(projectId: string, userId: string, relations: readonly string[]): TupleKey[] {
  const intent = grantIntent(
    `user:${userId}`,
    `project:${projectId}`,
    relations,
    relations as readonly GrantableRelation[],
  );
  return [...(intent.payload.writes ?? [])];
}

const TYPES = ['organization', 'project'] as const;

/**
 * The grant `(user, object)` a tuple-outbox key renders. The object is found from the end (its type
 * is iam's), so a user whose id holds a `|` still splits right.
 */
function grantOf(partitionKey: string): PartitionFilter {
  const at = Math.max(...TYPES.map((type) => partitionKey.lastIndexOf(`|${type}:`)));
  if (at <= 0)
    throw new OutboxConfigError(
      'partitionKey',
      `${JSON.stringify(partitionKey)} is not a grant key of iam.fga_outbox (user|organization:… or user|project:…)`,
    );
  return { user: partitionKey.slice(0, at), object: partitionKey.slice(at + 1) };
}

const partitionOf = (tuple: TupleKey) => grantTupleKey(tuple.user, tuple.object);
const owned = (tuple: TupleKey): OwnedPartition => ({
  partitionKey: partitionOf(tuple),
  objectKnown: true,
  tuples: [tuple],
});

type Source = 'organizations' | 'projects' | 'grants';
const SOURCES: readonly Source[] = ['organizations', 'projects', 'grants'];
/** Where a page starts: a source, and the primary key of the last row read from it. */
type Cursor = [Source, ...string[]];

async function page(
  db: Kysely<IamDatabase>,
  [source, ...after]: Cursor,
  limit: number,
): Promise<{ partitions: OwnedPartition[]; last: string[] | undefined }> {
  const lastOf = <R>(rows: R[], key: (row: R) => string[]) =>
    rows.length === limit ? key(rows.at(-1) as R) : undefined;
  if (source === 'organizations') {
    let query = db.selectFrom('iam.organizations').select(['id', 'created_by']).orderBy('id').limit(limit);
    if (after[0] !== undefined) query = query.where('id', '>', after[0]);
    const rows = await query.execute();
    return {
      partitions: rows.map((r) => owned(organizationOwnerTuple(r.id, r.created_by))),
      last: lastOf(rows, (r) => [r.id]),
    };
  }
  if (source === 'projects') {
    let query = db.selectFrom('iam.projects').select(['id', 'organization_id']).orderBy('id').limit(limit);
    if (after[0] !== undefined) query = query.where('id', '>', after[0]);
    const rows = await query.execute();
    return {
      partitions: rows.map((r) => owned(projectOrganizationTuple(r.id, r.organization_id))),
      last: lastOf(rows, (r) => [r.id]),
    };
  }
  let query = db
    .selectFrom('iam.project_grants')
    .select(['project_id', 'user_id', 'relations'])
    .orderBy('project_id')
    .orderBy('user_id')
    .limit(limit);
  if (after.length === 2) query = query.where(sql<boolean>`(project_id, user_id) > (${after[0]}, ${after[1]})`);
  const rows = await query.execute();
  return {
    partitions: rows.map((r) => ({
      partitionKey: grantTupleKey(`user:${r.user_id}`, `project:${r.project_id}`),
      objectKnown: true,
      tuples: grantTuples(r.project_id, r.user_id, r.relations),
    })),
    last: lastOf(rows, (r) => [r.project_id, r.user_id]),
  };
}

/**
 * The owner mapping of iam's tuple outbox, for the audit and repair of @outbox/reconciler. Its
 * objects are organizations and projects; a partition is a grant `(user, object)`
 * ({@link grantTupleKey}). What the rows expect is what their create paths and PUTs write, built by
 * the same functions: an organization's creator as its owner ({@link organizationOwnerTuple}), a
 * project's organization ({@link projectOrganizationTuple}), and each grant row's relation set
 * ({@link grantTuples}, `grantIntent`'s writes). Anything else stored on an organization or project
 * (another subject, another relation) is unexpected: iam's tables are the whole truth of them.
 *
 * @example
 * const report = await auditOutbox({ db, spec: iamOutbox, owner: iamOwner, reader });
 */
export const iamOwner: OutboxOwner = {
  objectTypes: TYPES,
  partitionOf,
  partitionFilter: grantOf,
  async expectedPage(trx, after, limit): Promise<OwnedPage> {
    const cursor = (after === undefined ? [SOURCES[0]] : JSON.parse(after)) as Cursor;
    const { partitions, last } = await page(trx as Kysely<IamDatabase>, cursor, limit);
    const following = SOURCES[SOURCES.indexOf(cursor[0]) + 1];
    const next: Cursor | undefined = last ? [cursor[0], ...last] : following ? [following] : undefined;
    return { partitions, next: next && JSON.stringify(next) };
  },
  async partitions(trx, keys) {
    const db = trx as Kysely<IamDatabase>;
    const grants = keys.map((key) => ({ key, ...grantOf(key) }));
    const idsOf = (type: string) => [
      ...new Set(grants.filter((g) => g.object.startsWith(`${type}:`)).map((g) => g.object.slice(type.length + 1))),
    ];
    const organizations = idsOf('organization');
    const projects = idsOf('project');
    const asked = grants.filter((g) => g.object.startsWith('project:') && g.user?.startsWith('user:'));
    const orgRows =
      organizations.length === 0
        ? []
        : await db
            .selectFrom('iam.organizations')
            .select(['id', 'created_by'])
            .where(sql<boolean>`id = any(${organizations}::text[])`)
            .execute();
    const projectRows =
      projects.length === 0
        ? []
        : await db
            .selectFrom('iam.projects')
            .select(['id', 'organization_id'])
            .where(sql<boolean>`id = any(${projects}::text[])`)
            .execute();
    const projectIds = asked.map((g) => g.object.slice('project:'.length));
    const userIds = asked.map((g) => (g.user as string).slice('user:'.length));
    const grantRows =
      asked.length === 0
        ? []
        : await db
            .selectFrom('iam.project_grants')
            .select(['project_id', 'user_id', 'relations'])
            .where(
              sql<boolean>`(project_id, user_id) in (select * from unnest(${projectIds}::text[], ${userIds}::text[]))`,
            )
            .execute();
    // Every tuple the rows imply, by object; a partition expects those that map to its key.
    const known = new Set<string>();
    const implied = new Map<string, TupleKey[]>();
    const add = (tuple: TupleKey) => implied.set(tuple.object, [...(implied.get(tuple.object) ?? []), tuple]);
    for (const tuple of [
      ...orgRows.map((r) => organizationOwnerTuple(r.id, r.created_by)),
      ...projectRows.map((r) => projectOrganizationTuple(r.id, r.organization_id)),
    ]) {
      known.add(tuple.object);
      add(tuple);
    }
    for (const r of grantRows) grantTuples(r.project_id, r.user_id, r.relations).forEach(add);
    return grants.map(({ key, object }) => ({
      partitionKey: key,
      objectKnown: known.has(object),
      tuples: (implied.get(object) ?? []).filter((tuple) => partitionOf(tuple) === key),
    }));
  },
};
