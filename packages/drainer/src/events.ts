/** What the drainer reports through `onEvent`, with timings, for logs and metrics. */
export type DrainerEvent =
  | { readonly type: 'batch-claimed'; readonly table: string; readonly count: number; readonly heads: number; readonly claimMs: number }
  | { readonly type: 'delivered'; readonly table: string; readonly ids: readonly string[]; readonly deliverMs: number }
  | { readonly type: 'retried'; readonly table: string; readonly ids: readonly string[]; readonly errors: readonly string[] }
  | { readonly type: 'poisoned'; readonly table: string; readonly ids: readonly string[]; readonly partitionKeys: readonly string[]; readonly errors: readonly string[] }
  | { readonly type: 'pass-failed'; readonly table: string; readonly error: Error; readonly halted: boolean };

/** A minimal structured logger (console, pino and winston fit). */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
