import type { RedrivenIntent } from '@outbox/reconciler';
import { Type, type Static, type TSchema } from '@sinclair/typebox';

/*
 * The JSON document each command prints with --json: one per run, on stdout. docs/cli.md points
 * here; the tests check real output against these schemas, so the two cannot part. A field is
 * only ever added (scripts read these): a renamed or removed field is a new major version.
 */

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
/** An outbox row id: a bigint, as a string. */
const Id = Type.String({ pattern: '^[0-9]+$' });
const Timestamp = Type.String({ format: 'date-time' });
const Count = Type.Integer({ minimum: 0 });
const strict = { additionalProperties: false } as const;
/** Why a poisoned row is poisoned (docs/ledger.md); null when not poisoned, or poisoned before causes were recorded (read as exhausted). */
const PoisonCause = Nullable(Type.Union([Type.Literal('exhausted'), Type.Literal('refused')]));

/** The states `list --state` filters on and rows are shown in (docs/design.md §2; `discarded`: §10). */
export const RowStateSchema = Type.Union([
  Type.Literal('deliverable'),
  Type.Literal('backing-off'),
  Type.Literal('poisoned'),
  Type.Literal('superseded'),
  Type.Literal('delivered'),
  Type.Literal('retired'),
  Type.Literal('discarded'),
]);
export type RowState = Static<typeof RowStateSchema>;

export const StatusOutbox = Type.Object(
  {
    name: Type.String(),
    table: Type.String(),
    /** The database URL, password masked. */
    database: Type.String(),
    pending: Count,
    deliverable: Count,
    backingOff: Count,
    poisoned: Count,
    /** `poisoned` by cause: `refused` for good by OpenFGA (revived only when asked), `exhausted` by transient failures. */
    poisonedByCause: Type.Object({ exhausted: Count, refused: Count }, strict),
    superseded: Count,
    retired: Count,
    /** Poisoned rows closed without their tuples ever being written (`outbox discard`). */
    discarded: Count,
    oldestPendingAgeSeconds: Nullable(Type.Number({ minimum: 0 })),
    lastDeliveryAt: Nullable(Timestamp),
  },
  strict,
);
export const StatusOutput = Type.Object({ at: Timestamp, outboxes: Type.Array(StatusOutbox) }, strict);
export type StatusOutput = Static<typeof StatusOutput>;
export type StatusOutbox = Static<typeof StatusOutbox>;

export const ListedRow = Type.Object(
  {
    id: Id,
    partitionKey: Type.String(),
    state: RowStateSchema,
    attempts: Count,
    createdAt: Timestamp,
    nextAttemptAt: Timestamp,
    sentAt: Nullable(Timestamp),
    retiredAt: Nullable(Timestamp),
    /** Whole, never cut (the table cuts it). */
    lastError: Nullable(Type.String()),
    poisonCause: PoisonCause,
    /** The sink's code of a refusal, e.g. OpenFGA's `validation_error`. */
    poisonCode: Nullable(Type.String()),
  },
  strict,
);
export const ListOutput = Type.Object(
  {
    outboxes: Type.Array(
      Type.Object(
        { name: Type.String(), table: Type.String(), rows: Type.Array(ListedRow), more: Type.Boolean() },
        strict,
      ),
    ),
  },
  strict,
);
export type ListOutput = Static<typeof ListOutput>;
export type ListedRow = Static<typeof ListedRow>;

export const ShowOutput = Type.Object(
  {
    outbox: Type.String(),
    table: Type.String(),
    ...ListedRow.properties,
    maxAttempts: Count,
    payload: Type.Unknown(),
    retiredReason: Nullable(Type.String()),
    isHead: Type.Boolean(),
    /** For a superseded row: the earliest delivered successor that covers it. */
    supersededBy: Nullable(Id),
  },
  strict,
);
export type ShowOutput = Static<typeof ShowOutput>;

export const DrainOutbox = Type.Object(
  {
    name: Type.String(),
    table: Type.String(),
    passes: Count,
    batches: Count,
    claimed: Count,
    delivered: Count,
    retried: Count,
    poisoned: Count,
    released: Count,
    halted: Type.Boolean(),
    haltReason: Nullable(Type.String()),
    left: Type.Object({ deliverable: Count, poisoned: Count }, strict),
  },
  strict,
);
export const DrainOutput = Type.Object({ ok: Type.Boolean(), outboxes: Type.Array(DrainOutbox) }, strict);
export type DrainOutput = Static<typeof DrainOutput>;
export type DrainOutbox = Static<typeof DrainOutbox>;

const Intent = Type.Object(
  {
    id: Id,
    partitionKey: Type.String(),
    lastError: Nullable(Type.String()),
    poisonCause: PoisonCause,
    poisonCode: Nullable(Type.String()),
  },
  strict,
);
export type IntentOutput = Static<typeof Intent>;

/** A reconciler's intent as the JSON prints it: every field present, null where the row has none. */
export function intentOutput(intent: RedrivenIntent): IntentOutput {
  return {
    id: intent.id,
    partitionKey: intent.partitionKey,
    lastError: intent.lastError,
    poisonCause: intent.poisonCause ?? null,
    poisonCode: intent.poisonCode ?? null,
  };
}

/** A refused intent a redrive left poisoned: asked to retry (`requested`), it is revived once `reviveAfter` has passed. */
const WaitingIntent = Type.Object(
  { ...Intent.properties, requested: Type.Boolean(), reviveAfter: Nullable(Timestamp) },
  strict,
);
export type WaitingOutput = Static<typeof WaitingIntent>;
export const RedriveOutput = Type.Object(
  {
    dryRun: Type.Boolean(),
    /** Refused rows were asked to retry too (`--refused`). */
    refused: Type.Boolean(),
    outboxes: Type.Array(
      Type.Object(
        {
          name: Type.String(),
          table: Type.String(),
          revived: Type.Array(Intent),
          superseded: Type.Array(Intent),
          deferred: Type.Array(Intent),
          /** Refused rows left poisoned (docs/ledger.md, "Redrive"): revived only with --refused, once their spacing passed. */
          waiting: Type.Array(WaitingIntent),
          skipped: Type.Boolean(),
          more: Type.Boolean(),
          moreSuperseded: Type.Boolean(),
          moreWaiting: Type.Boolean(),
        },
        strict,
      ),
    ),
  },
  strict,
);
export type RedriveOutput = Static<typeof RedriveOutput>;

/** What `retire` and `discard` print besides the rows they closed: the ids refused, each with why. */
const closeFields = {
  outbox: Type.String(),
  table: Type.String(),
  reason: Type.String(),
  refused: Type.Array(Type.Object({ id: Type.String(), refusal: Type.String() }, strict)),
};
export const RetireOutput = Type.Object({ ...closeFields, retired: Type.Array(Intent) }, strict);
export type RetireOutput = Static<typeof RetireOutput>;
export const DiscardOutput = Type.Object({ ...closeFields, discarded: Type.Array(Intent) }, strict);
export type DiscardOutput = Static<typeof DiscardOutput>;

export const CompactOutbox = Type.Object(
  {
    name: Type.String(),
    table: Type.String(),
    /** `delivered + closed`. */
    deleted: Count,
    delivered: Count,
    /** Retired and discarded rows. */
    closed: Count,
    scanned: Count,
    batches: Count,
    /** Another compaction of the table held its lock: this one did nothing. */
    skipped: Type.Boolean(),
  },
  strict,
);
export const CompactOutput = Type.Object(
  { dryRun: Type.Boolean(), retentionMs: Count, closedRetentionMs: Count, outboxes: Type.Array(CompactOutbox) },
  strict,
);
export type CompactOutput = Static<typeof CompactOutput>;

const TupleKey = Type.Object(
  {
    user: Type.String(),
    relation: Type.String(),
    object: Type.String(),
    condition: Type.Optional(
      Type.Object({ name: Type.String(), context: Type.Optional(Type.Record(Type.String(), Type.Unknown())) }, strict),
    ),
  },
  strict,
);
const PartitionSample = Type.Object(
  { partitionKey: Type.String(), object: Type.String(), tuples: Type.Array(TupleKey), tupleCount: Count },
  strict,
);
const DriftKind = Type.Object({ partitions: Count, tuples: Count, sample: Type.Array(PartitionSample) }, strict);
const Reads = Type.Object({ tuplePages: Count, partitionReads: Count, changePages: Count }, strict);
export const AuditOutbox = Type.Object(
  {
    name: Type.String(),
    table: Type.String(),
    mode: Type.Union([Type.Literal('full'), Type.Literal('incremental')]),
    objectTypes: Type.Array(Type.String()),
    partitionsCompared: Count,
    liveTuplesRead: Count,
    candidates: Count,
    skippedPending: Count,
    drifted: Count,
    missing: DriftKind,
    unexpected: DriftKind,
    orphans: Type.Object(
      {
        objects: Count,
        partitions: Count,
        tuples: Count,
        sample: Type.Array(
          Type.Object(
            {
              object: Type.String(),
              partitionKeys: Type.Array(Type.String()),
              tuples: Type.Array(TupleKey),
              tupleCount: Count,
            },
            strict,
          ),
        ),
      },
      strict,
    ),
    reads: Reads,
    startedAt: Timestamp,
    durationMs: Type.Number({ minimum: 0 }),
  },
  strict,
);
export const AuditOutput = Type.Object({ drifted: Count, outboxes: Type.Array(AuditOutbox) }, strict);
export type AuditOutput = Static<typeof AuditOutput>;

const Correction = Type.Object(
  { partitionKey: Type.String(), writes: Type.Array(TupleKey), deletes: Type.Array(TupleKey) },
  strict,
);
export const RepairOutbox = Type.Object(
  {
    name: Type.String(),
    table: Type.String(),
    dryRun: Type.Boolean(),
    partitions: Count,
    intents: Count,
    writes: Count,
    deletes: Count,
    skippedPending: Count,
    agreed: Count,
    withinBudget: Type.Boolean(),
    maxDeletes: Count,
    enqueued: Type.Array(Id),
    sample: Type.Array(Correction),
    reads: Reads,
  },
  strict,
);
export const RepairOutput = Type.Object({ dryRun: Type.Boolean(), outboxes: Type.Array(RepairOutbox) }, strict);
export type RepairOutput = Static<typeof RepairOutput>;

/** One row of an outbox's actions log (docs/ledger.md, "The actions log"). */
export const ActionOutput = Type.Object(
  {
    /** The log row's id: newer actions have larger ones. */
    id: Id,
    /** When the action's (first) transaction started. */
    at: Timestamp,
    /** Who acted: `--actor`, or the OS user. */
    actor: Type.String({ minLength: 1 }),
    action: Type.Union([
      Type.Literal('redrive'),
      Type.Literal('retire'),
      Type.Literal('discard'),
      Type.Literal('repair'),
      Type.Literal('compact'),
    ]),
    /** The outbox rows it changed: revived, retired, discarded, or enqueued by a repair (none for a compaction). */
    ids: Type.Array(Id),
    /** How many of each it changed, e.g. `{ "discarded": 2 }`, `{ "deleted": 120, "delivered": 100, "closed": 20 }`. */
    counts: Type.Record(Type.String(), Count),
    /** Why: retire's and discard's reason; null for the others. */
    reason: Nullable(Type.String()),
  },
  strict,
);
export type ActionOutput = Static<typeof ActionOutput>;
export const ActionsOutput = Type.Object(
  {
    outboxes: Type.Array(
      Type.Object(
        {
          name: Type.String(),
          table: Type.String(),
          /** Newest first, at most --limit. */
          actions: Type.Array(ActionOutput),
          /** Older actions were left out by --limit. */
          more: Type.Boolean(),
        },
        strict,
      ),
    ),
  },
  strict,
);
export type ActionsOutput = Static<typeof ActionsOutput>;

export const DoctorCheck = Type.Object(
  {
    /** The outbox it is about, or null for one about the whole setup (OpenFGA, a database). */
    outbox: Nullable(Type.String()),
    check: Type.String(),
    status: Type.Union([Type.Literal('pass'), Type.Literal('fail'), Type.Literal('warn'), Type.Literal('skip')]),
    detail: Type.String(),
    /** What to do about a fail or warn. */
    fix: Nullable(Type.String()),
    /** SQL that recreates what the check found missing, from the migrations' own DDL: run it as printed. */
    sql: Nullable(Type.String()),
  },
  strict,
);
export const DoctorOutput = Type.Object({ ok: Type.Boolean(), checks: Type.Array(DoctorCheck) }, strict);
export type DoctorOutput = Static<typeof DoctorOutput>;
export type DoctorCheck = Static<typeof DoctorCheck>;

/** Every command's --json schema, by command: what docs/cli.md points to and the tests check. */
/** One intent of a consistency token, as `outbox token` found it (`awaitDelivered`'s outcome). */
export const TokenIntent = Type.Object(
  {
    outbox: Type.String(),
    table: Type.String(),
    id: Id,
    status: Type.Union(
      ['delivered', 'superseded', 'poisoned', 'blocked', 'retired', 'pending'].map((s) => Type.Literal(s)),
    ),
    deliveredAt: Type.Optional(Timestamp),
    cause: Type.Optional(Type.Union([Type.Literal('exhausted'), Type.Literal('refused')])),
    code: Type.Optional(Nullable(Type.String())),
    lastError: Type.Optional(Nullable(Type.String())),
    blockedBy: Type.Optional(Id),
    reason: Type.Optional(Nullable(Type.String())),
    closedAs: Type.Optional(Nullable(Type.String())),
  },
  strict,
);
export const TokenOutput = Type.Object(
  {
    settled: Type.Boolean(),
    delivered: Type.Boolean(),
    newestDeliveryAgeMs: Nullable(Type.Number({ minimum: 0 })),
    intents: Type.Array(TokenIntent),
  },
  strict,
);
export type TokenOutput = Static<typeof TokenOutput>;

export const OUTPUT_SCHEMAS = Object.freeze({
  status: StatusOutput,
  list: ListOutput,
  show: ShowOutput,
  drain: DrainOutput,
  redrive: RedriveOutput,
  retire: RetireOutput,
  discard: DiscardOutput,
  compact: CompactOutput,
  audit: AuditOutput,
  repair: RepairOutput,
  actions: ActionsOutput,
  doctor: DoctorOutput,
  token: TokenOutput,
});
