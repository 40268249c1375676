import { PayloadError } from './errors.js';

/** An OpenFGA relationship tuple key, as the Write API takes it. */
export interface TupleKey {
  /** `type:id`, `type:id#relation` (a userset) or `type:*` (a wildcard). */
  readonly user: string;
  readonly relation: string;
  /** `type:id`. */
  readonly object: string;
  readonly condition?: { readonly name: string; readonly context?: Record<string, unknown> };
}

/**
 * What one intent asks of OpenFGA, applied as one transaction (deletes first). Extra fields stay in
 * the row (e.g. iam's `relations`, read by its coverage SQL); the sink ignores them.
 */
export interface IntentPayload {
  readonly writes?: readonly TupleKey[];
  readonly deletes?: readonly TupleKey[];
  readonly [extra: string]: unknown;
}

/** OpenFGA's limit of tuple operations (writes + deletes) in one Write request, hence per intent. */
export const MAX_TUPLES_PER_INTENT = 100;

// OpenFGA's own forms. No NUL anywhere: Postgres cannot store it (a driver error, not a PayloadError).
const TYPE = '[^:#@\\s\\0]{1,254}';
const ID = '[^:#\\s\\0]{1,256}';
const RELATION_NAME = '[^:#@\\s\\0]{1,50}';
const RELATION = new RegExp(`^${RELATION_NAME}$`);
const OBJECT = new RegExp(`^${TYPE}:${ID}$`);
// `type:*`, `type:id` or `type:id#relation`; never a wildcard userset (`type:*#relation`).
const USER = new RegExp(`^${TYPE}:(\\*|(?!\\*#)${ID}(#${RELATION_NAME})?)$`);
const CONDITION_NAME = /^[^\s\0]{1,50}$/;

/** With a `toJSON` of its own, an object would be stored as what `toJSON` returns, not as validated. */
function plainJson(path: string, value: object): void {
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    throw new PayloadError(
      path,
      'has a toJSON method: it would be stored as what toJSON returns, not as validated; pass a plain object',
    );
  }
}

function tupleKey(path: string, value: unknown): TupleKey {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new PayloadError(path, 'expected a tuple key { user, relation, object, condition? }');
  }
  plainJson(path, value);
  const { user, relation, object, condition } = value as Record<string, unknown>;
  if (typeof user !== 'string' || !USER.test(user) || user.length > 512) {
    throw new PayloadError(
      `${path}.user`,
      `expected "type:id", "type:id#relation" or "type:*", got ${JSON.stringify(user)}`,
    );
  }
  if (typeof relation !== 'string' || !RELATION.test(relation)) {
    throw new PayloadError(
      `${path}.relation`,
      `expected a relation name (no ':', '#', '@' or spaces), got ${JSON.stringify(relation)}`,
    );
  }
  if (typeof object !== 'string' || !OBJECT.test(object) || object.length > 256) {
    throw new PayloadError(`${path}.object`, `expected "type:id", got ${JSON.stringify(object)}`);
  }
  if (object.endsWith(':*')) throw new PayloadError(`${path}.object`, 'an object cannot be a wildcard');
  if (condition !== undefined) {
    if (condition === null || typeof condition !== 'object' || Array.isArray(condition)) {
      throw new PayloadError(`${path}.condition`, 'expected { name, context? }');
    }
    plainJson(`${path}.condition`, condition);
    const { name, context } = condition as Record<string, unknown>;
    if (typeof name !== 'string' || !CONDITION_NAME.test(name)) {
      throw new PayloadError(`${path}.condition.name`, `expected a condition name, got ${JSON.stringify(name)}`);
    }
    if (context !== undefined && (context === null || typeof context !== 'object' || Array.isArray(context))) {
      throw new PayloadError(`${path}.condition.context`, 'expected an object');
    }
    if (context !== undefined) plainJson(`${path}.condition.context`, context);
  }
  return value as TupleKey;
}

function tupleList(path: string, value: unknown): readonly TupleKey[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new PayloadError(path, 'expected an array of tuple keys');
  // Every index, holes included (map and forEach skip a hole, which JSON then writes as null).
  return Array.from({ length: value.length }, (_, index) => tupleKey(`${path}[${index}]`, value[index]));
}

/**
 * Checks an intent payload (docs/design.md §4): well-formed tuple keys, 1 to 100 operations, no
 * tuple key twice (OpenFGA refuses it, even as a write and a delete), nothing jsonb cannot store
 * unchanged. Throws a {@link PayloadError} naming the offending path.
 * @example
 * validatePayload(JSON.parse(body), 'body.payload');
 */
export function validatePayload(payload: unknown, path = 'payload'): IntentPayload {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    throw new PayloadError(path, 'expected { writes?: TupleKey[], deletes?: TupleKey[] }');
  }
  plainJson(path, payload);
  const record = payload as Record<string, unknown>;
  const writes = tupleList(`${path}.writes`, record.writes);
  const deletes = tupleList(`${path}.deletes`, record.deletes);
  const total = writes.length + deletes.length;
  if (total === 0) throw new PayloadError(path, 'needs at least one write or delete');
  if (total > MAX_TUPLES_PER_INTENT) {
    throw new PayloadError(
      path,
      `has ${total} operations; OpenFGA takes at most ${MAX_TUPLES_PER_INTENT} in one request: split the intent`,
    );
  }
  const seen = new Map<string, string>();
  const check = (list: readonly TupleKey[], kind: string) =>
    list.forEach((key, index) => {
      const id = `${key.user} ${key.relation} ${key.object}`;
      const first = seen.get(id);
      if (first !== undefined) {
        throw new PayloadError(
          `${path}.${kind}[${index}]`,
          `repeats the tuple key of ${first} (${key.user}, ${key.relation}, ${key.object})`,
        );
      }
      seen.set(id, `${path}.${kind}[${index}]`);
    });
  check(writes, 'writes');
  check(deletes, 'deletes');
  storableJson(path, record, new Set());
  return record as IntentPayload;
}

// A UTF-16 surrogate without its pair: JSON.stringify writes it as an escape jsonb refuses.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function storableString(path: string, value: string): void {
  if (value.includes('\0')) throw new PayloadError(path, 'contains a NUL character, which Postgres cannot store');
  if (LONE_SURROGATE.test(value))
    throw new PayloadError(path, 'contains a lone UTF-16 surrogate (broken text), which Postgres cannot store');
}

// Everything must reach jsonb unchanged: no NUL, lone surrogate, BigInt, cycle, NaN, Infinity or function.
function storableJson(path: string, value: unknown, seen: Set<object>): void {
  switch (typeof value) {
    case 'string':
      return storableString(path, value);
    case 'number':
      if (!Number.isFinite(value))
        throw new PayloadError(path, `is ${value}, which JSON cannot hold (it would be stored as null)`);
      return;
    case 'boolean':
    case 'undefined':
      return;
    case 'bigint':
    case 'function':
    case 'symbol':
      throw new PayloadError(path, `is a ${typeof value}, which JSON cannot hold`);
  }
  if (value === null) return;
  const object = value as object;
  if (seen.has(object))
    throw new PayloadError(path, 'refers back to an enclosing value (a cycle), which JSON cannot hold');
  if (typeof (object as { toJSON?: unknown }).toJSON === 'function') return; // a Date, say: JSON asks it
  seen.add(object);
  if (Array.isArray(object)) {
    for (let index = 0; index < object.length; index += 1) {
      // A hole or an undefined item is written as null: the array would be stored changed.
      if (!(index in object) || object[index] === undefined) {
        throw new PayloadError(`${path}[${index}]`, 'is missing (a hole or undefined), which JSON stores as null');
      }
      storableJson(`${path}[${index}]`, object[index], seen);
    }
  } else {
    for (const [key, item] of Object.entries(object)) {
      storableString(`${path} key ${JSON.stringify(key)}`, key);
      storableJson(`${path}.${key}`, item, seen);
    }
  }
  seen.delete(object);
}

/**
 * Checks a partition key: a non-empty string of at most 1024 UTF-8 bytes (a btree entry holds
 * ~2.7 kB), without NUL or lone surrogates (the driver would store another key).
 * @example
 * validatePartitionKey(`vpc:${id}`);
 */
export function validatePartitionKey(key: unknown, path = 'partitionKey'): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new PayloadError(
      path,
      `expected a non-empty string (the resource id or tuple key), got ${JSON.stringify(key)}`,
    );
  }
  if (Buffer.byteLength(key, 'utf8') > 1_024) throw new PayloadError(path, 'is longer than 1024 bytes (UTF-8)');
  storableString(path, key);
  return key;
}
