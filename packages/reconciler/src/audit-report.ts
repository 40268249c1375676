import type { TupleKey } from '@outbox/outbox';
import type { AuditReads } from './audit-context.js';
import type { DriftedPartition } from './audit-confirm.js';

/** One drifted partition in a report's sample. */
export interface PartitionSample {
  readonly partitionKey: string;
  readonly object: string;
  /** The partition's tuples of this kind, at most `sampleSize` of them. */
  readonly tuples: readonly TupleKey[];
  /** How many there are (`tuples` may be cut). */
  readonly tupleCount: number;
}

/** One orphan object in a report's sample: tuples on an object no owner row names. */
export interface OrphanSample {
  readonly object: string;
  /** Its partitions (one for a register-outbox; one per subject for the tuple outbox). */
  readonly partitionKeys: readonly string[];
  /** Its live tuples, at most `sampleSize` of them. */
  readonly tuples: readonly TupleKey[];
  readonly tupleCount: number;
}

/** One kind of drift: how much, and a bounded sample. */
export interface DriftKind<Sample> {
  readonly partitions: number;
  readonly tuples: number;
  /** At most `sampleSize` entries, in partition-key order. */
  readonly sample: readonly Sample[];
}

/**
 * What an audit found for one outbox; clean when `drifted` is 0 (docs/agreement.md).
 *
 * @example
 * if (report.drifted > 0) logger.warn('drift', { missing: report.missing.tuples });
 */
export interface AuditReport {
  /** The outbox table, e.g. `vpc.fga_register_outbox`. */
  readonly outbox: string;
  readonly mode: 'full' | 'incremental';
  readonly objectTypes: readonly string[];
  /** Partitions compared: full, every one the owner or OpenFGA has tuples in; incremental, those changed since its token. */
  readonly partitionsCompared: number;
  /** Live tuples the full scan read on the owner's types (0 for an incremental audit without a scan). */
  readonly liveTuplesRead: number;
  /** Partitions that differed at first look and were confirmed (or skipped as pending). */
  readonly candidates: number;
  /** Partitions that differed but had an intent pending, or committed meanwhile: not drift (yet). */
  readonly skippedPending: number;
  /** Partitions still drifted once confirmed: the sum of the kinds below, a partition counted once. */
  readonly drifted: number;
  /** Tuples the owner expects that OpenFGA does not hold, on objects the owner knows. */
  readonly missing: DriftKind<PartitionSample>;
  /** Tuples OpenFGA holds on objects the owner knows, that the owner does not expect. */
  readonly unexpected: DriftKind<PartitionSample>;
  /** Tuples on objects no owner row names (its row deleted without its tuples, or never there). */
  readonly orphans: DriftKind<OrphanSample> & { readonly objects: number };
  /** OpenFGA requests made. */
  readonly reads: AuditReads;
  readonly startedAt: Date;
  readonly durationMs: number;
}

/** What an audit's steps gathered, before it is summed up. */
export interface Findings {
  readonly compared: number;
  readonly liveTuples: number;
  readonly candidates: number;
  /** Partitions skipped as pending (or changed while confirmed): what a continuous audit looks at again. */
  readonly pending: readonly string[];
  readonly drifted: readonly DriftedPartition[];
}

const byKey = (a: { partitionKey: string }, b: { partitionKey: string }) =>
  a.partitionKey < b.partitionKey ? -1 : a.partitionKey > b.partitionKey ? 1 : 0;

function kind(
  drifted: readonly DriftedPartition[],
  pick: (p: DriftedPartition) => readonly TupleKey[],
  sampleSize: number,
): DriftKind<PartitionSample> {
  const found = drifted.filter((p) => pick(p).length > 0).sort(byKey);
  return {
    partitions: found.length,
    tuples: found.reduce((sum, p) => sum + pick(p).length, 0),
    sample: found.slice(0, sampleSize).map((p) => ({
      partitionKey: p.partitionKey,
      object: p.object,
      tuples: pick(p).slice(0, sampleSize),
      tupleCount: pick(p).length,
    })),
  };
}

function orphans(drifted: readonly DriftedPartition[], sampleSize: number): AuditReport['orphans'] {
  const found = drifted.filter((p) => !p.objectKnown && p.unexpected.length > 0).sort(byKey);
  const objects = new Map<string, { partitionKeys: string[]; tuples: TupleKey[] }>();
  for (const p of found) {
    const entry = objects.get(p.object) ?? { partitionKeys: [], tuples: [] };
    entry.partitionKeys.push(p.partitionKey);
    entry.tuples.push(...p.unexpected);
    objects.set(p.object, entry);
  }
  const sample = [...objects]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .slice(0, sampleSize)
    .map(([object, e]) => ({
      object,
      partitionKeys: e.partitionKeys.slice(0, sampleSize),
      tuples: e.tuples.slice(0, sampleSize),
      tupleCount: e.tuples.length,
    }));
  return {
    objects: objects.size,
    partitions: found.length,
    tuples: found.reduce((sum, p) => sum + p.unexpected.length, 0),
    sample,
  };
}

/** Sums findings up into a report, samples bounded by `sampleSize`. */
export function auditReport(
  base: Pick<AuditReport, 'outbox' | 'mode' | 'objectTypes' | 'reads' | 'startedAt'>,
  findings: Findings,
  sampleSize: number,
): AuditReport {
  const known = findings.drifted.filter((p) => p.objectKnown);
  return {
    ...base,
    reads: { ...base.reads },
    partitionsCompared: findings.compared,
    liveTuplesRead: findings.liveTuples,
    candidates: findings.candidates,
    skippedPending: findings.pending.length,
    drifted: findings.drifted.length,
    missing: kind(known, (p) => p.missing, sampleSize),
    unexpected: kind(known, (p) => p.unexpected, sampleSize),
    orphans: orphans(findings.drifted, sampleSize),
    durationMs: Date.now() - base.startedAt.getTime(),
  };
}
