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
