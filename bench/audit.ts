import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  type OpenFgaClient,
} from '@openfga/sdk';
import { createDrainer } from '@outbox/drainer';
import { migrateToLatest, vpcOutbox, vpcTable } from '@outbox/migrations';
import { createOpenFgaTupleReader } from '@outbox/openfga';
import { enqueueMany, type AnyKysely, type EnqueueInput, type TupleKey } from '@outbox/outbox';
import { auditOutbox, auditOutboxIncremental, type AuditReport } from '@outbox/reconciler';
import { registerServiceOwner, registrationTuples, resourceObject } from '@outbox/service-kit';
import { createDatabase, startStack } from '@outbox/test-stack';
import { sql } from 'kysely';
import { kysely } from './bench-db.js';
import { freshStore, type OpenFgaTarget } from './openfga-store.js';
import { runPool } from './run-pool.js';
import { count, knob, sleep } from './statistics.js';
import type { SectionResult } from './summary.js';

const TUPLES_PER_WRITE = 100;
const WRITES_IN_FLIGHT = 8;
/** Out-of-band edits made among the changes: the incremental audit must find exactly these. */
const OUT_OF_BAND = 100;

const owner = registerServiceOwner({ fgaType: 'vpc', resourceTable: vpcTable });
const idOf = (i: number) => `a${String(i).padStart(7, '0')}`;
const rowTuples = (i: number): TupleKey[] => registrationTuples(resourceObject('vpc', idOf(i)), `p${i % 100}`, `u${i}`);
const conflict = {
  onDuplicateWrites: ClientWriteRequestOnDuplicateWrites.Ignore,
  onMissingDeletes: ClientWriteRequestOnMissingDeletes.Ignore,
};

/** Writes (or deletes) `tuples` straight into the store, 100 a Write: the seeding and the out-of-band edits, not the outbox. */
async function writeDirect(
  client: OpenFgaClient,
  tuples: readonly TupleKey[],
  kind: 'writes' | 'deletes',
): Promise<void> {
  const requests = Array.from(
    { length: Math.ceil(tuples.length / TUPLES_PER_WRITE) },
    (_, r) => () =>
      client.write(
        { [kind]: tuples.slice(r * TUPLES_PER_WRITE, (r + 1) * TUPLES_PER_WRITE) },
        { conflict, retryParams: { maxRetry: 3 } },
      ),
  );
  await runPool(requests, WRITES_IN_FLIGHT);
}

/** Owner rows 1…n of `vpc.vpcs`, as the create path writes them. */
const insertRows = (db: AnyKysely, from: number, to: number) =>
  sql`insert into vpc.vpcs (id, project_id, name, created_by, cidr_block)
      select 'a' || lpad(i::text, 7, '0'), 'p' || (i % 100), 'n' || i, 'u' || i, '10.0.0.0/16' from generate_series(${from}::int, ${to}::int) i`.execute(
    db,
  );

const seconds = (report: AuditReport) => `${(report.durationMs / 1000).toFixed(1)} s`;
const reads = (report: AuditReport) =>
  `${count(report.reads.tuplePages)} scan pages, ${count(report.reads.partitionReads)} partition reads, ${count(report.reads.changePages)} changelog pages`;
const drift = (report: AuditReport) =>
  `${count(report.drifted)} (missing ${count(report.missing.tuples)}, unexpected ${count(report.unexpected.tuples)}, orphan objects ${count(report.orphans.objects)})`;

/**
 * `pnpm bench audit`: the audit of docs/agreement.md on the vpc service's owner mapping, against a
 * real OpenFGA (postgres datastore). BENCH_AUDIT_OBJECTS (100,000) owner rows whose two tuples each
 * are in the store; a full audit; then BENCH_AUDIT_CHANGES (10,000) changes through the outbox (half
 * deletes, half creates, drained into OpenFGA) plus 100 out-of-band edits, and the incremental
 * audit that must find exactly those 100.
 */
export async function benchAudit(): Promise<SectionResult> {
  const objects = knob('BENCH_AUDIT_OBJECTS', 100_000);
  const changes = Math.floor(knob('BENCH_AUDIT_CHANGES', 10_000) / 2) * 2;
  const stack = await startStack({ openfgaDatastore: 'postgres', fastPostgres: false });
  const target: OpenFgaTarget = { apiUrl: stack.openfga.apiUrl, token: stack.openfga.presharedKey };
  let db: AnyKysely | undefined;
  try {
    const url = await createDatabase(stack.postgresUrl, 'bench_audit');
    db = kysely(url, 4);
    await migrateToLatest(db);
    const store = await freshStore(target);
    const reader = createOpenFgaTupleReader({ client: store.client });
    const audit = { db, spec: vpcOutbox, owner, reader };

    console.error(`[bench] audit: seeding ${count(objects)} owner rows and their tuples…`);
    const seedStarted = performance.now();
    await insertRows(db, 1, objects);
    await sql`analyze vpc.vpcs`.execute(db);
    await writeDirect(store.client, Array.from({ length: objects }, (_, n) => rowTuples(n + 1)).flat(), 'writes');
    const seedMs = performance.now() - seedStarted;

    console.error('[bench] audit: full audit…');
    const full = await auditOutbox(audit);
    if (full.drifted !== 0)
      throw new Error(`bench audit: the seeded store should agree with the owner, the full audit found ${drift(full)}`);
    // The first incremental audit is a full one that stores the changelog positions.
    const first = await auditOutboxIncremental(audit);

    console.error(`[bench] audit: ${count(changes)} changes through the outbox and ${OUT_OF_BAND} out of band…`);
    const deleted = Array.from({ length: changes / 2 }, (_, n) => 1 + n * Math.floor(objects / (changes / 2)));
    const created = Array.from({ length: changes / 2 }, (_, n) => objects + 1 + n);
    await db.transaction().execute(async (trx) => {
      await sql`delete from vpc.vpcs where id = any(${deleted.map(idOf)}::text[])`.execute(trx);
      await insertRows(trx, objects + 1, objects + changes / 2);
      const intents: EnqueueInput[] = [
        ...deleted.map((i) => ({ partitionKey: resourceObject('vpc', idOf(i)), payload: { deletes: rowTuples(i) } })),
        ...created.map((i) => ({ partitionKey: resourceObject('vpc', idOf(i)), payload: { writes: rowTuples(i) } })),
      ];
      for (let at = 0; at < intents.length; at += 1_000)
        await enqueueMany(trx, vpcOutbox, intents.slice(at, at + 1_000));
    });
    const drainer = createDrainer({
      db,
      spec: vpcOutbox,
      sink: store.sink,
      listen: false,
      intervalMs: 3_600_000,
      lateWrites: false,
    });
    let delivered = 0;
    while (delivered < changes) {
      const pass = await drainer.drainOnce();
      delivered += pass.delivered;
      if (pass.poisoned > 0) throw new Error(`bench audit: ${pass.poisoned} intents poisoned`);
      if (pass.claimed === 0) await sleep(5);
    }
    await drainer.stop();
    // Out of band: half the edits delete a kept object's owner tuple (missing), half add a tuple on an object with no row (orphan).
    const kept = Array.from({ length: OUT_OF_BAND / 2 }, (_, n) => 2 + n * Math.floor(objects / (OUT_OF_BAND / 2)));
    await writeDirect(
      store.client,
      kept.map((i) => rowTuples(i)[1] as TupleKey),
      'deletes',
    );
    const orphans = Array.from({ length: OUT_OF_BAND / 2 }, (_, n): TupleKey => ({
      user: 'user:intruder',
      relation: 'owner',
      object: `vpc:orphan-${n}`,
    }));
    await writeDirect(store.client, orphans, 'writes');

    console.error('[bench] audit: incremental audits…');
    // Both ways from the same stored tokens: re-reading each changed partition, then the default.
    await sql`create table public.bench_audit_cursor as select * from public.outbox_audit_cursor`.execute(db);
    const reread = await auditOutboxIncremental({ ...audit, scanAbove: 100_000_000 });
    await sql`delete from public.outbox_audit_cursor`.execute(db);
    await sql`insert into public.outbox_audit_cursor select * from public.bench_audit_cursor`.execute(db);
    const incremental = await auditOutboxIncremental(audit);
    for (const report of [reread, incremental]) {
      if (report.drifted !== OUT_OF_BAND)
        throw new Error(
          `bench audit: the incremental audit should find the ${OUT_OF_BAND} out-of-band edits, found ${drift(report)}`,
        );
    }
    const fullAfter = await auditOutbox(audit);
    if (fullAfter.drifted !== OUT_OF_BAND)
      throw new Error(
        `bench audit: the full audit should find the ${OUT_OF_BAND} out-of-band edits, found ${drift(fullAfter)}`,
      );

    const row = (what: string, report: AuditReport) =>
      `| ${what} | ${seconds(report)} | ${count(report.partitionsCompared)} | ${count(report.liveTuplesRead)} | ${reads(report)} | ${drift(report)} |`;
    return {
      markdown: [
        `### Audit: ${count(objects)} objects of the vpc owner mapping, then ${count(changes)} changes`,
        '',
        `A store seeded with the two tuples of each of ${count(objects)} \`vpc.vpcs\` rows (${(seedMs / 1000).toFixed(0)} s to seed, not measured below),`,
        'OpenFGA on the postgres datastore, audits with the defaults. The changes go through the outbox (half deregisters of',
        `existing rows, half registers of new ones, drained into OpenFGA); then ${OUT_OF_BAND / 2} owner tuples are deleted and ${OUT_OF_BAND / 2} orphan tuples`,
        'written out of band, which the audits after the changes must find, and nothing else.',
        '',
        '| audit | time | partitions compared | live tuples read | OpenFGA requests | drift found |',
        '| --- | ---: | ---: | ---: | --- | --- |',
        row(`full, ${count(objects)} objects`, full),
        row('first incremental (a full audit that stores the changelog tokens)', first),
        row(
          `incremental after ${count(changes)} changes + ${OUT_OF_BAND} out of band, re-reading each changed partition`,
          reread,
        ),
        row(
          `**incremental after the same, default** (above \`scanAbove\`, 2,000 changed partitions, it scans)`,
          incremental,
        ),
        row(`full after the changes (${count(objects)} objects again)`, fullAfter),
      ].join('\n'),
      targets: [
        {
          target: `audit: full audit of ${count(objects)} objects (no target in the issue; time)`,
          figure: seconds(full),
          met: null,
        },
        {
          target: `audit: incremental after ${count(changes)} changes, finds exactly the ${OUT_OF_BAND} out-of-band edits (no time target)`,
          figure: `${seconds(incremental)} (re-reading each changed partition: ${seconds(reread)}), ${count(incremental.drifted)} found`,
          met: null,
        },
      ],
    };
  } finally {
    await db?.destroy();
    await stack.stop();
  }
}
