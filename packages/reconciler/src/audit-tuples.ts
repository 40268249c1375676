import type { TupleKey } from '@outbox/outbox';
import { hash64, hash64ToBigInt } from './partition-digests.js';

/** JSON with object keys sorted, so two equal contexts compare equal whatever their key order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    return `{${entries
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** OpenFGA's identity of a tuple: the key `(user, relation, object)`; one request may name it once. */
export function tupleKeyId(tuple: TupleKey): string {
  return `${tuple.user} ${tuple.relation} ${tuple.object}`;
}

/**
 * The identity the audit compares: the key and its condition. A stored tuple whose condition
 * differs from the expected one is both unexpected (as stored) and missing (as expected).
 */
export function tupleId(tuple: TupleKey): string {
  const condition = tuple.condition;
  if (!condition) return tupleKeyId(tuple);
  const context =
    condition.context && Object.keys(condition.context).length > 0 ? ` ${canonical(condition.context)}` : '';
  return `${tupleKeyId(tuple)} ?${condition.name}${context}`;
}

/** The tuples of a partition by identity (duplicates collapse). */
export function tupleSet(tuples: Iterable<TupleKey>): Map<string, TupleKey> {
  const set = new Map<string, TupleKey>();
  for (const tuple of tuples) set.set(tupleId(tuple), tuple);
  return set;
}

/** What differs between what the owner expects and what OpenFGA holds, in one partition. */
export interface TupleDiff {
  /** Expected and not stored. */
  readonly missing: readonly TupleKey[];
  /** Stored and not expected. */
  readonly unexpected: readonly TupleKey[];
}

export function diffTuples(expected: Iterable<TupleKey>, live: Iterable<TupleKey>): TupleDiff {
  const want = tupleSet(expected);
  const have = tupleSet(live);
  return {
    missing: [...want].filter(([id]) => !have.has(id)).map(([, t]) => t),
    unexpected: [...have].filter(([id]) => !want.has(id)).map(([, t]) => t),
  };
}

/** Whether two tuple lists hold the same tuples (order and duplicates aside). */
export function sameTuples(a: Iterable<TupleKey>, b: Iterable<TupleKey>): boolean {
  const diff = diffTuples(a, b);
  return diff.missing.length === 0 && diff.unexpected.length === 0;
}

const DIGEST_MASK = (1n << 64n) - 1n;

/** A tuple identity's 64-bit hash, for {@link tupleDigest}. */
export function tupleHash(id: string): bigint {
  return hash64ToBigInt(hash64(id));
}

/**
 * A partition's tuples as one number: the sum (mod 2^64) of their identities' hashes, duplicates
 * collapsed. Two sets digest alike in any order; two different sets collide with a chance of 2^-64.
 * The full audit holds this per partition instead of the tuples (`PartitionDigests`).
 */
export function tupleDigest(tuples: Iterable<TupleKey>): bigint {
  let digest = 0n;
  for (const id of tupleSet(tuples).keys()) digest = (digest + tupleHash(id)) & DIGEST_MASK;
  return digest;
}
