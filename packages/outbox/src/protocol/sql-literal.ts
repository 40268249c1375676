/**
 * Checked or escaped SQL literals, for statements sent without bind parameters in the simple query
 * protocol (docs/outbox-sql.md, "The calls"). Each throws a TypeError on a value it cannot write.
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
      if (!/^-?\d{1,19}$/.test(value))
        throw new TypeError(`expected a decimal bigint for SQL, got ${JSON.stringify(value)}`);
    }
    return `'{${values.join(',')}}'::bigint[]`;
  },
  /** Strings (without NUL) to a `text[]` of escape strings, read alike whatever `standard_conforming_strings` says. */
  textArray(values: readonly string[]): string {
    if (values.length === 0) return `'{}'::text[]`;
    const items = values.map((value) => {
      if (typeof value !== 'string' || value.includes('\0'))
        throw new TypeError(`expected a string without NUL for SQL, got ${JSON.stringify(value)}`);
      return `E'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
    });
    return `array[${items.join(',')}]::text[]`;
  },
};
