/**
 * Test fixture (not exported from the package): an owner, its outbox and a fresh OpenFGA store,
 * in either outbox shape, driven step by step — writes through the owner's transaction, deliveries
 * through the real OpenFGA sink, poisonings as the drainer records them — so a test can replay a
 * history and read every decision the ledger feeds: the redrive's (dry runs), the stats and the audit.
 */
import { CredentialsMethod, OpenFgaClient } from '@openfga/sdk';
import { createOpenFgaSink, createOpenFgaTupleReader } from '@outbox/openfga';
import {
  enqueue,
  outboxStats,
  type AnyKysely,
  type IntentPayload,
  type OutboxSpec,
  type TupleKey,
} from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { createOpenFgaStore, stackInfo } from '@outbox/test-stack';
import { sql } from 'kysely';
import { auditOutbox } from '../audit.js';
import { createReconciler } from '../create-reconciler.js';
import type { OutboxOwner, OwnedPartition } from '../owner.js';
import { createTestOutbox, deliver, poison, recordingLogger, refuse } from './outbox-fixture.js';

export type Shape = 'register' | 'tuple';

/** Containment: a delivered `s` covers `t` only when it named every relation `t` did, so coverage can fail. */
const CONTAINMENT = `(s.payload->'relations') @> (t.payload->'relations')`;
const RELATIONS = ['owner', 'editor', 'viewer'] as const;
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id).sort();

let worlds = 0;

export async function ledgerWorld(db: AnyKysely, shape: Shape) {
  worlds += 1;
  const spec: OutboxSpec = await createTestOutbox(
    db,
    shape === 'tuple' ? { partitionColumn: 'tuple_key', supersededCoverageSql: CONTAINMENT } : {},
  );
  const names = tableNames(spec);
  const owners = sql.raw(`reconciler.ledger_owner_${worlds}`);
  await sql`create table ${owners} (key text primary key, relations text[] not null)`.execute(db);
  const stack = stackInfo();
  const credentials = stack.openfgaPresharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } }
    : {};
  const { storeId } = await createOpenFgaStore(
    stack.openfgaApiUrl,
    stack.openfgaPresharedKey ? { presharedKey: stack.openfgaPresharedKey } : {},
  );
  const client = new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, storeId, ...credentials });
  const sink = createOpenFgaSink({ client });
  const reconciler = createReconciler({ db, spec, logger: recordingLogger() });

  const keyOf = (i: number) => (shape === 'register' ? `vpc:v${i}` : `user:u${i}|project:p1`);
  /** The tuples an owner row with `relations` expects (register: the create path's two). */
  const tuplesOf = (key: string, relations: readonly string[]): TupleKey[] => {
    if (shape === 'register')
      return [
        { user: 'project:p1', relation: 'project', object: key },
        { user: 'user:ann', relation: 'owner', object: key },
      ];
    const [user, object] = key.split('|') as [string, string];
    return relations.map((relation) => ({ user, relation, object }));
  };
  const owned = (key: string, relations: readonly string[] | undefined): OwnedPartition => ({
    partitionKey: key,
    objectKnown: relations !== undefined,
    tuples: relations === undefined ? [] : tuplesOf(key, relations),
  });
  const owner: OutboxOwner = {
    objectTypes: [shape === 'register' ? 'vpc' : 'project'],
    partitionOf: (tuple) => (shape === 'register' ? tuple.object : `${tuple.user}|${tuple.object}`),
    partitionFilter: (key) =>
      shape === 'register'
        ? { object: key }
        : { user: key.split('|')[0] as string, object: key.split('|')[1] as string },
    async expectedPage(trx, after, limit) {
      const rows = await sql<{ key: string; relations: string[] }>`
        select key, relations from ${owners} where ${after === undefined ? sql`true` : sql`key > ${after}`} order by key limit ${limit}`.execute(
        trx,
      );
      return {
        partitions: rows.rows.map((r) => owned(r.key, r.relations)),
        next: rows.rows.length === limit ? rows.rows.at(-1)?.key : undefined,
      };
    },
    async partitions(trx, keys) {
      const rows = await sql<{
        key: string;
        relations: string[];
      }>`select key, relations from ${owners} where key = any(${[...keys]}::text[])`.execute(trx);
      const found = new Map(rows.rows.map((r) => [r.key, r.relations]));
      // The tuple shape's object (a project) is known whatever the grant; only its user's tuples are expected.
      return keys.map((key) => owned(key, found.get(key) ?? (shape === 'tuple' ? [] : undefined)));
    },
  };
  const reader = createOpenFgaTupleReader({ client });
  const head = async (key: string) =>
    (
      await sql<{
        id: string;
        payload: IntentPayload;
      }>`select id::text as id, payload from ${sql.raw(names.table)} where ${sql.raw(names.partition)} = ${key} and is_head`.execute(
        db,
      )
    ).rows[0];

  return {
    spec,
    keyOf,
    /**
     * The owner's change and its intent, in one transaction. Register: `variant` odd creates the
     * object, even deletes it. Tuple: `variant`'s bits are the grant's new relation set, enqueued
     * whole (writes the set, deletes the rest) and summarised in `relations`.
     */
    async write(i: number, variant: number): Promise<void> {
      const key = keyOf(i);
      await db.transaction().execute(async (trx) => {
        let payload: IntentPayload;
        if (shape === 'register') {
          const create = variant % 2 === 1;
          if (create)
            await sql`insert into ${owners} (key, relations) values (${key}, '{}') on conflict do nothing`.execute(trx);
          else await sql`delete from ${owners} where key = ${key}`.execute(trx);
          payload = create ? { writes: tuplesOf(key, []) } : { deletes: tuplesOf(key, []) };
        } else {
          const set = RELATIONS.filter((_, bit) => (variant >> bit) & 1);
          if (set.length > 0)
            await sql`insert into ${owners} (key, relations) values (${key}, ${set}::text[]) on conflict (key) do update set relations = excluded.relations`.execute(
              trx,
            );
          else await sql`delete from ${owners} where key = ${key}`.execute(trx);
          const rest = RELATIONS.filter((relation) => !set.includes(relation));
          payload = {
            ...(set.length > 0 ? { writes: tuplesOf(key, set) } : {}),
            ...(rest.length > 0 ? { deletes: tuplesOf(key, rest) } : {}),
            relations: [...set],
          };
        }
        await enqueue(trx, spec, { partitionKey: key, payload });
      });
    },
    /** The partition's head, delivered to OpenFGA by the sink and recorded as the drainer does. */
    async deliverHead(i: number): Promise<void> {
      const row = await head(keyOf(i));
      if (!row) return;
      const [outcome] = await sink.deliver(
        [{ id: row.id, partitionKey: keyOf(i), payload: row.payload, attemptCount: 0 }],
        { signal: new AbortController().signal },
      );
      if (outcome?.kind !== 'delivered') throw new Error(`OpenFGA did not take ${row.id}: ${JSON.stringify(outcome)}`);
      await deliver(db, spec, row.id);
    },
    /** The partition's head poisoned: out of attempts, or refused for good. */
    async poisonHead(i: number, refused: boolean): Promise<void> {
      const row = await head(keyOf(i));
      if (!row) return;
      if (refused) await refuse(db, spec, row.id);
      else await poison(db, spec, row.id);
    },
    redrive: (refused: boolean) => reconciler.redrivePoisoned(refused ? { refused: true, reason: 'model-change' } : {}),
    /** A human's turn: retire what is superseded, discard the first revivable row. */
    async close(): Promise<void> {
      const preview = await reconciler.redrivePoisoned({ dryRun: true, refused: true });
      if (preview.superseded.length > 0)
        await reconciler.retire(
          preview.superseded.map((r) => r.id),
          'superseded',
        );
      const first = preview.revived[0];
      if (first) await reconciler.discardPoisoned({ ids: [first.id], reason: 'never granted, on purpose' });
    },
    /** Ages the rows up to the `fraction`-th id by `days` (ids follow creation, so the oldest are first). */
    async age(fraction: number, days: number): Promise<void> {
      await sql`
        with cut as (select percentile_disc(${fraction}) within group (order by id) as id from ${sql.raw(names.table)})
        update ${sql.raw(names.table)} t set created_at = t.created_at - make_interval(days => ${days}),
          sent_at = t.sent_at - make_interval(days => ${days}), retired_at = t.retired_at - make_interval(days => ${days})
        from cut where t.id <= cut.id`.execute(db);
    },
    /** Everything a decision reads the ledger for. */
    async decisions() {
      const plain = await reconciler.redrivePoisoned({ dryRun: true });
      const asked = await reconciler.redrivePoisoned({ dryRun: true, refused: true });
      const { pending, deliverable, poisoned, poisonedByCause, superseded, oldestPendingAgeSeconds } =
        await outboxStats(db, spec);
      const audit = await auditOutbox({ db, spec, owner, reader });
      return {
        redrive: { revived: ids(plain.revived), superseded: ids(plain.superseded), waiting: ids(plain.waiting ?? []) },
        refused: { revived: ids(asked.revived), superseded: ids(asked.superseded) },
        stats: {
          pending,
          deliverable,
          poisoned,
          poisonedByCause,
          superseded,
          pendingAge: oldestPendingAgeSeconds === null ? null : Math.floor(oldestPendingAgeSeconds / 3_600),
        },
        audit: {
          drifted: audit.drifted,
          missing: audit.missing,
          unexpected: audit.unexpected,
          orphans: audit.orphans,
          skippedPending: audit.skippedPending,
        },
      };
    },
    rows: async () =>
      (await sql<{ n: number }>`select count(*)::int as n from ${sql.raw(names.table)}`.execute(db)).rows[0]?.n ?? 0,
    dispose: () => client.deleteStore().catch(() => undefined),
  };
}
