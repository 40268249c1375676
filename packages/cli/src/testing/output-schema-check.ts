// Checks a command's --json document against its documented schema. Test-only.
import { FormatRegistry } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { OUTPUT_SCHEMAS } from '../output-schemas.js';

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
if (!FormatRegistry.Has('date-time'))
  FormatRegistry.Set('date-time', (value) => ISO.test(value) && !Number.isNaN(Date.parse(value)));

/** Throws, listing every mismatch, unless `document` fits the schema of `command`'s --json output. */
export function assertOutputSchema(command: keyof typeof OUTPUT_SCHEMAS, document: unknown): void {
  const schema = OUTPUT_SCHEMAS[command];
  if (Value.Check(schema, document)) return;
  const errors = [...Value.Errors(schema, document)]
    .slice(0, 10)
    .map((e) => `${e.path || '/'}: ${e.message} (got ${JSON.stringify(e.value)})`);
  throw new Error(`${command} --json does not match its schema:\n${errors.join('\n')}`);
}
