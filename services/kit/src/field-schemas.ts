import type { ResourceColumn, ResourceColumnType } from '@outbox/migrations';
import { Type, type Static, type TSchema } from 'typebox';

/** An id as the services accept it for users and projects: it becomes `user:<id>` / `project:<id>` in OpenFGA. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$/;
export const ID_DESCRIPTION = 'an id of 1 to 128 letters, digits or . _ @ + - (starting with a letter or digit)';

/** A reference to an id (a project, an organization, a user). */
export const ID_FIELD = Type.String({ description: ID_DESCRIPTION, pattern: ID_PATTERN.source });

/** A resource name: a DNS label, so it can name hosts and buckets alike. */
export const NAME_FIELD = Type.String({
  description: 'a name of 1 to 63 lower-case letters, digits or hyphens, not starting or ending with a hyphen',
  pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$',
});

/**
 * The check behind a custom `format` of a string schema (e.g. `ipv4-cidr-block`): what is wrong
 * with the value, or undefined. The validator accepts what it accepts, and a 400 quotes what it says.
 */
export type FormatCheck = (value: string) => string | undefined;

/** The TypeScript type a resource column holds. */
type ColumnValue<T extends ResourceColumnType> = T extends 'text' ? string : T extends 'integer' ? number : boolean;

/**
 * One TypeBox schema per own column of a resource table. `F[K]` must validate values of the
 * column's type: an integer schema for a `text` column does not compile.
 */
export type FieldSchemas<
  C extends Readonly<Record<string, ResourceColumn>>,
  F extends { readonly [K in keyof C]: TSchema },
> = {
  readonly [K in keyof C]: Static<F[K]> extends ColumnValue<C[K]['type']> ? F[K] : never;
};

/** How long a value from a request body may be when an error message quotes it. */
const SHOWN_MAX = 80;

/**
 * A value from a request, as an error message quotes it: JSON, cut to a few dozen characters.
 * Never throws: a value nested too deep for `JSON.stringify` (a 64 KB body holds 30,000 levels of
 * `[`) is the caller's mistake, a 400, not a 500 from a stack overflow while describing it.
 */
export function shownValue(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = Array.isArray(value)
      ? 'an array nested too deep'
      : typeof value === 'object' && value !== null
        ? 'an object nested too deep'
        : String(value);
  }
  return text.length > SHOWN_MAX ? `${text.slice(0, SHOWN_MAX)}… (${text.length} characters)` : text;
}
