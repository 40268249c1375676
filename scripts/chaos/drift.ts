import type { OpenFgaClient } from '@openfga/sdk';
import { vpcTable } from '@outbox/migrations';
import { registrationTuples } from '@outbox/service-kit';
import type { AnyKysely } from '@outbox/outbox';

/** One object whose tuples in OpenFGA differ from what the owner table says. */
export interface DriftedObject {
  readonly object: string;
  /** Whether the owner table has the resource's row. */
  readonly rowPresent: boolean;
  /** Expected and absent, as `user relation object`. */
  readonly missing: readonly string[];
  /** Present and not expected. */
  readonly unexpected: readonly string[];
}

/** The owner (vpc.vpcs) against OpenFGA's live tuples. */
export interface DriftReport {
  /** Objects compared: every resource row, and every object OpenFGA holds a tuple on. */
  readonly objects: number;
  readonly missing: number;
  readonly unexpected: number;
  readonly drifted: readonly DriftedObject[];
}

const line = (t: { user: string; relation: string; object: string }) => `${t.user} ${t.relation} ${t.object}`;

/**
 * Compares what the owner table says (row present: its registration tuples, the same function the
 * create path uses; row absent: nothing) with every tuple in the store. Run it when nothing is
 * pending: a pending intent is not drift (docs/design.md §9). One function, so the audit library
 * can replace it in one place.
 *
 * @example
 * const { missing, unexpected, drifted } = await checkDrift(db, new OpenFgaClient({ apiUrl, storeId }));
 */
export async function checkDrift(db: AnyKysely, client: OpenFgaClient): Promise<DriftReport> {
  const rows = await db.selectFrom(vpcTable.qualifiedName).select(['id', 'project_id', 'created_by']).execute();
  const expected = new Map<string, Set<string>>();
  for (const row of rows as Array<{ id: string; project_id: string; created_by: string }>) {
    const object = `vpc:${row.id}`;
    expected.set(object, new Set(registrationTuples(object, row.project_id, row.created_by).map(line)));
  }
  const actual = new Map<string, Set<string>>();
  let continuationToken: string | undefined;
  do {
    const page = await client.read({}, { pageSize: 100, ...(continuationToken ? { continuationToken } : {}) });
    for (const { key } of page.tuples) {
      const set = actual.get(key.object) ?? new Set<string>();
      set.add(line(key));
      actual.set(key.object, set);
    }
    continuationToken = page.continuation_token || undefined;
  } while (continuationToken);

  const drifted: DriftedObject[] = [];
  let missing = 0;
  let unexpected = 0;
  const objects = new Set([...expected.keys(), ...actual.keys()]);
  for (const object of [...objects].sort()) {
    const want = expected.get(object) ?? new Set<string>();
    const have = actual.get(object) ?? new Set<string>();
    const gone = [...want].filter((t) => !have.has(t));
    const extra = [...have].filter((t) => !want.has(t));
    if (gone.length + extra.length === 0) continue;
    missing += gone.length;
    unexpected += extra.length;
    drifted.push({ object, rowPresent: expected.has(object), missing: gone, unexpected: extra });
  }
  return { objects: objects.size, missing, unexpected, drifted };
}
