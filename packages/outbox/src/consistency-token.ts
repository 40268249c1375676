import { defineOutbox, type OutboxSpec } from './define-outbox.js';
import { OutboxTokenError } from './errors.js';

/**
 * A consistency token: which intents, of which outboxes, in which database, a write committed
 * (docs/design.md §12). Minted in the business transaction (`outboxToken`), carried opaque between
 * services (the `Outbox-Token` header), and waited on anywhere (`awaitDelivered`).
 */
export interface OutboxTokenContents {
  readonly version: 1;
  /** The database: `<system identifier>/<database name>`, the same on a physical replica. */
  readonly database: string;
  readonly outboxes: readonly TokenOutbox[];
}

/** One outbox's part of a token. */
export interface TokenOutbox {
  /** `<schema>.<table>`. */
  readonly table: string;
  /** The table's oid: a table dropped and created again under the same name is another outbox. */
  readonly tableOid: number;
  readonly partitionColumn: string;
  /** Intent ids, ascending, distinct. */
  readonly ids: readonly string[];
}

const PREFIX = 'ot1.';
/** Bounds that keep a token a header's size (fastify takes 16 KiB of headers by default). */
export const MAX_TOKEN_OUTBOXES = 32;
export const MAX_TOKEN_CHARS = 8_192;

const DECIMAL = /^[1-9][0-9]{0,18}$/;

function byId(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}

/** Ascending runs `12-15,20`: ids of one enqueue are consecutive, so a token stays small. */
function encodeIds(ids: readonly string[]): string {
  const runs: string[] = [];
  let start: bigint | undefined;
  let end = 0n;
  for (const id of ids) {
    const value = BigInt(id);
    if (start !== undefined && value === end + 1n) {
      end = value;
      continue;
    }
    if (start !== undefined) runs.push(start === end ? `${start}` : `${start}-${end}`);
    start = value;
    end = value;
  }
  if (start !== undefined) runs.push(start === end ? `${start}` : `${start}-${end}`);
  return runs.join(',');
}

function decodeIds(text: unknown, where: string): string[] {
  if (typeof text !== 'string' || text === '') throw malformed(`${where} has no intent ids`);
  const ids: string[] = [];
  for (const run of text.split(',')) {
    const [from = '', to = from, extra] = run.split('-');
    if (extra !== undefined || !DECIMAL.test(from) || !DECIMAL.test(to))
      throw malformed(`${where}: bad id run "${run}"`);
    const first = BigInt(from);
    const last = BigInt(to);
    if (last < first) throw malformed(`${where}: id run "${run}" runs backwards`);
    if (last - first >= 10_000n) throw malformed(`${where}: id run "${run}" is longer than a token carries`);
    for (let id = first; id <= last; id += 1n) ids.push(`${id}`);
  }
  const sorted = [...new Set(ids)].sort(byId);
  if (sorted.length !== ids.length || sorted.some((id, i) => id !== ids[i])) {
    throw malformed(`${where}: ids are not ascending and distinct`);
  }
  return sorted;
}

function malformed(detail: string): OutboxTokenError {
  return new OutboxTokenError('malformed', `not an outbox consistency token: ${detail}`);
}

/** The token's text for `contents`; outboxes in table order, so equal contents give equal text. */
export function encodeOutboxToken(contents: OutboxTokenContents): string {
  const outboxes = [...contents.outboxes].sort((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0));
  const body = {
    d: contents.database,
    o: outboxes.map((o) => [o.table, o.tableOid, o.partitionColumn, encodeIds([...o.ids].sort(byId))]),
  };
  const token = PREFIX + Buffer.from(JSON.stringify(body)).toString('base64url');
  if (token.length > MAX_TOKEN_CHARS || outboxes.length > MAX_TOKEN_OUTBOXES) {
    throw new OutboxTokenError(
      'too-large',
      `a token names at most ${MAX_TOKEN_OUTBOXES} outboxes in ${MAX_TOKEN_CHARS} characters; this one would be ` +
        `${outboxes.length} in ${token.length}: wait on the writes in smaller groups`,
    );
  }
  return token;
}

/** A token's contents; an {@link OutboxTokenError} (`malformed`) says what is wrong with one that is not. */
export function decodeOutboxToken(token: unknown): OutboxTokenContents {
  if (typeof token !== 'string') throw malformed(`expected a string, got ${typeof token}`);
  const text = token.trim();
  if (!text.startsWith(PREFIX)) {
    throw malformed(`it should start with "${PREFIX}" (a token of another version, or another header's value)`);
  }
  if (text.length > MAX_TOKEN_CHARS) throw malformed(`${text.length} characters, more than ${MAX_TOKEN_CHARS}`);
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(text.slice(PREFIX.length), 'base64url').toString('utf8'));
  } catch {
    throw malformed('its body is not base64url JSON (cut short or edited?)');
  }
  const { d, o } = (body ?? {}) as { d?: unknown; o?: unknown };
  if (typeof d !== 'string' || !/^[0-9]+\/.+$/.test(d)) throw malformed('it names no database');
  if (!Array.isArray(o) || o.length === 0 || o.length > MAX_TOKEN_OUTBOXES) {
    throw malformed(`it names no outbox, or more than ${MAX_TOKEN_OUTBOXES}`);
  }
  const outboxes = o.map((entry: unknown, i): TokenOutbox => {
    const where = `outbox ${i}`;
    if (!Array.isArray(entry) || entry.length !== 4) throw malformed(`${where} is not [table, oid, column, ids]`);
    const [table, tableOid, partitionColumn, ids] = entry as unknown[];
    if (typeof table !== 'string' || typeof partitionColumn !== 'string') throw malformed(`${where} has no table`);
    if (!Number.isSafeInteger(tableOid) || (tableOid as number) <= 0) throw malformed(`${where} has no table oid`);
    try {
      defineOutbox({ table, partitionColumn });
    } catch (error) {
      throw malformed(`${where}: ${error instanceof Error ? error.message : String(error)}`);
    }
    return { table, tableOid: tableOid as number, partitionColumn, ids: decodeIds(ids, where) };
  });
  if (new Set(outboxes.map((x) => x.table)).size !== outboxes.length) throw malformed('it names an outbox twice');
  return { version: 1, database: d, outboxes };
}

/**
 * One token standing for every write of `tokens` (ids are unioned per outbox). All must name the
 * same database: intents of two databases are not waited on together.
 * @example
 * const token = mergeOutboxTokens(vpcToken, iamToken);
 */
export function mergeOutboxTokens(...tokens: readonly string[]): string {
  if (tokens.length === 0) throw new OutboxTokenError('malformed', 'mergeOutboxTokens needs at least one token');
  const decoded = tokens.map(decodeOutboxToken);
  const database = (decoded[0] as OutboxTokenContents).database;
  const byTable = new Map<string, { outbox: TokenOutbox; ids: Set<string> }>();
  for (const contents of decoded) {
    if (contents.database !== database) {
      throw new OutboxTokenError(
        'other-database',
        `tokens of two databases (${database} and ${contents.database}) cannot be merged`,
      );
    }
    for (const outbox of contents.outboxes) {
      const seen = byTable.get(outbox.table);
      if (
        seen &&
        (seen.outbox.tableOid !== outbox.tableOid || seen.outbox.partitionColumn !== outbox.partitionColumn)
      ) {
        throw new OutboxTokenError(
          'other-outbox',
          `two tokens name different tables under ${outbox.table} (dropped and created again between them?)`,
        );
      }
      const entry = seen ?? { outbox, ids: new Set<string>() };
      for (const id of outbox.ids) entry.ids.add(id);
      byTable.set(outbox.table, entry);
    }
  }
  return encodeOutboxToken({
    version: 1,
    database,
    outboxes: [...byTable.values()].map(({ outbox, ids }) => ({ ...outbox, ids: [...ids].sort(byId) })),
  });
}

/**
 * How two tokens' writes compare: `equal`, `covers` (every write of `b` is in `a`), `covered`
 * (every write of `a` is in `b`) or `neither`. Tokens of two databases are `neither`.
 */
export function compareOutboxTokens(a: string, b: string): 'equal' | 'covers' | 'covered' | 'neither' {
  const [left, right] = [decodeOutboxToken(a), decodeOutboxToken(b)];
  if (left.database !== right.database) return 'neither';
  const writes = (contents: OutboxTokenContents) =>
    new Set(contents.outboxes.flatMap((o) => o.ids.map((id) => `${o.table}#${o.tableOid}#${id}`)));
  const [l, r] = [writes(left), writes(right)];
  const lCoversR = [...r].every((w) => l.has(w));
  const rCoversL = [...l].every((w) => r.has(w));
  if (lCoversR && rCoversL) return 'equal';
  if (lCoversR) return 'covers';
  if (rCoversL) return 'covered';
  return 'neither';
}

/** The spec a token's outbox is read with when the caller gave none: its table and partition column, the defaults otherwise. */
export function tokenOutboxSpec(outbox: TokenOutbox): OutboxSpec {
  return defineOutbox({ table: outbox.table, partitionColumn: outbox.partitionColumn });
}
