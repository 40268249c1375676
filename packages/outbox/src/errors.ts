/** A spec, a table or a component is configured wrongly; nothing was written. Names the field. */
export class OutboxConfigError extends Error {
  override readonly name = 'OutboxConfigError';
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(`${field}: ${message}`, options);
    this.field = field;
  }
}

/** An intent was refused before anything was written; `path` points at the value, e.g. `payload.writes[2].object`. */
export class PayloadError extends Error {
  override readonly name = 'PayloadError';
  readonly path: string;
  constructor(path: string, message: string) {
    super(`${path}: ${message}`);
    this.path = path;
  }
}

/** The live outbox table does not match the contract (docs/design.md §4); `missing` lists every gap. */
export class OutboxTableError extends Error {
  override readonly name = 'OutboxTableError';
  readonly table: string;
  readonly missing: readonly string[];
  constructor(table: string, missing: readonly string[]) {
    super(
      `outbox table ${table} does not match the contract; missing or wrong:\n` +
        missing.map((m) => `  - ${m}`).join('\n') +
        `\nRun the outbox migration (createOutboxTable) for this spec, or point the spec at the right table.`,
    );
    this.table = table;
    this.missing = missing;
  }
}

/** Why a consistency token cannot be waited on (docs/design.md §12). */
export type OutboxTokenErrorKind = 'malformed' | 'too-large' | 'other-database' | 'other-outbox' | 'compacted';

/**
 * A consistency token that cannot be waited on, and why (`kind`): not a token (`malformed`), more
 * writes than a token carries (`too-large`), minted in another database (`other-database`), naming
 * a table this database does not have, or has since re-created (`other-outbox`), or naming intents
 * compaction has deleted (`compacted`: delivered long ago, past the retention; `ids` lists them).
 */
export class OutboxTokenError extends Error {
  override readonly name = 'OutboxTokenError';
  readonly kind: OutboxTokenErrorKind;
  /** With `compacted`: the intents no longer in the table, as `<table>#<id>`. */
  readonly ids: readonly string[];
  constructor(kind: OutboxTokenErrorKind, message: string, ids: readonly string[] = []) {
    super(message);
    this.kind = kind;
    this.ids = ids;
  }
}
