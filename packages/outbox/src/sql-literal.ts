/**
 * SQL literals for the drainer's two calls per batch. Sent as text with no bind parameters, a call
 * goes out in the simple query protocol: one message instead of parse, bind, describe, execute and
 * sync, which on a 100-row batch costs both the client and the server measurably more (see
 * docs/drainer-throughput.md). Every value is checked or escaped here; nothing else is spliced.
 *
 * @internal shared by @outbox/drainer; not for application code.
 */
export const sqlLiteral = {
  /** A safe integer (batch sizes, limits, attempt counts). */
  integer(value: number): string {
    if (!Number.isSafeInteger(value)) throw new TypeError(`expected a safe integer for SQL, got ${String(value)}`);
    return String(value);
  },
  boolean(value: boolean): string {
    if (typeof value !== 'boolean') throw new TypeError(`expected a boolean for SQL, got ${String(value)}`);
    return value ? 'true' : 'false';
  },
  /** Row ids as decimal strings (as pg returns bigint), to a `bigint[]`. */
  bigintArray(values: readonly string[]): string {
    for (const value of values) {
      if (!/^-?\d{1,19}$/.test(value)) throw new TypeError(`expected a decimal bigint for SQL, got ${JSON.stringify(value)}`);
    }
    return `'{${values.join(',')}}'::bigint[]`;
  },
  /**
   * Strings to a `text[]`, each as an escape string (`E'…'`): quotes and backslashes are escaped, so
   * the literal reads the same whatever `standard_conforming_strings` says. NUL cannot be sent
   * (Postgres text cannot hold it either).
   */
  textArray(values: readonly string[]): string {
    if (values.length === 0) return `'{}'::text[]`;
    const items = values.map((value) => {
      if (typeof value !== 'string' || value.includes('\0')) throw new TypeError(`expected a string without NUL for SQL, got ${JSON.stringify(value)}`);
      return `E'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
    });
    return `array[${items.join(',')}]::text[]`;
  },
};
