import type { ResourceColumn, ResourceColumnType } from '@outbox/migrations';
import { HttpError } from './errors.js';

/** A string field. */
export interface StringField {
  readonly type: 'string';
  /** What a valid value looks like, for the error message (e.g. `an IPv4 CIDR block like 10.0.0.0/16`). */
  readonly description: string;
  readonly pattern?: RegExp;
  /** Default 256: a resource attribute, not a document. */
  readonly maxLength?: number;
  readonly oneOf?: readonly string[];
  /** Further checks; returns what is wrong, or undefined. */
  readonly validate?: (value: string) => string | undefined;
  /** Used when the field is absent; without it the field is required. */
  readonly default?: string;
}

/** An integer field. */
export interface IntegerField {
  readonly type: 'integer';
  readonly description: string;
  readonly min?: number;
  readonly max?: number;
  readonly default?: number;
}

/** A boolean field. */
export interface BooleanField {
  readonly type: 'boolean';
  readonly description: string;
  readonly default?: boolean;
}

export type FieldRule = StringField | IntegerField | BooleanField;

/** The rule type that fits a column type: a `text` column takes a string field, and so on. */
export type FieldRuleFor<T extends ResourceColumnType> = T extends 'text' ? StringField : T extends 'integer' ? IntegerField : BooleanField;

/** One rule per column of a resource table's own columns, type-checked against them. */
export type FieldRules<C extends Readonly<Record<string, ResourceColumn>>> = { readonly [K in keyof C]: FieldRuleFor<C[K]['type']> };

/** An id as the services accept it for users and projects: it becomes `user:<id>` / `project:<id>` in OpenFGA. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$/;
export const ID_DESCRIPTION = 'an id of 1 to 128 letters, digits or . _ @ + - (starting with a letter or digit)';

/** A resource name: a DNS label, so it can name hosts and buckets alike. */
export const NAME_FIELD: StringField = {
  type: 'string',
  description: 'a name of 1 to 63 lower-case letters, digits or hyphens, not starting or ending with a hyphen',
  pattern: /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/,
};

/** A reference to an id (a project, an organization). */
export const ID_FIELD: StringField = { type: 'string', description: ID_DESCRIPTION, pattern: ID_PATTERN };

/** How long a value from a request body may be when an error message quotes it. */
const SHOWN_MAX = 80;

/**
 * A value from a request body, as an error message quotes it: JSON, cut to a few dozen characters.
 * Never throws: a value nested too deep for `JSON.stringify` (a 64 KB body holds 30,000 levels of
 * `[`) is the caller's mistake, a 400, not a 500 from a stack overflow while describing it.
 */
export function shownValue(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = Array.isArray(value) ? 'an array nested too deep' : typeof value === 'object' && value !== null ? 'an object nested too deep' : String(value);
  }
  return text.length > SHOWN_MAX ? `${text.slice(0, SHOWN_MAX)}… (${text.length} characters)` : text;
}

function checkField(name: string, rule: FieldRule, value: unknown): string | undefined {
  switch (rule.type) {
    case 'string': {
      if (typeof value !== 'string') return `${name}: expected a string (${rule.description}), got ${shownValue(value)}`;
      const max = rule.maxLength ?? 256;
      if (value.length > max) return `${name}: longer than ${max} characters`;
      if (rule.oneOf && !rule.oneOf.includes(value)) return `${name}: expected one of ${rule.oneOf.map((v) => JSON.stringify(v)).join(', ')}, got ${shownValue(value)}`;
      if (rule.pattern && !rule.pattern.test(value)) return `${name}: expected ${rule.description}, got ${shownValue(value)}`;
      const problem = rule.validate?.(value);
      return problem === undefined ? undefined : `${name}: ${problem}`;
    }
    case 'integer': {
      if (typeof value !== 'number' || !Number.isInteger(value)) return `${name}: expected an integer (${rule.description}), got ${shownValue(value)}`;
      if ((rule.min !== undefined && value < rule.min) || (rule.max !== undefined && value > rule.max)) {
        return `${name}: expected ${rule.description} (${rule.min ?? '-∞'} to ${rule.max ?? '∞'}), got ${value}`;
      }
      return undefined;
    }
    case 'boolean':
      return typeof value === 'boolean' ? undefined : `${name}: expected true or false, got ${shownValue(value)}`;
  }
}

/**
 * Validates a JSON request body against field rules and returns the values to store (defaults
 * filled in). Unknown fields are refused rather than ignored, so a typo is not silently dropped.
 * Throws one {@link HttpError} 400 listing every problem.
 *
 * @example
 * const values = validateBody(body, { name: NAME_FIELD, port: { type: 'integer', description: 'a port', min: 1, max: 65535 } });
 */
export function validateBody(body: unknown, rules: Readonly<Record<string, FieldRule>>): Record<string, string | number | boolean> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new HttpError(400, 'invalid_body', `expected a JSON object with ${Object.keys(rules).join(', ')}`);
  }
  const input = body as Record<string, unknown>;
  const problems: string[] = [];
  const values: Record<string, string | number | boolean> = {};
  for (const [name, rule] of Object.entries(rules)) {
    const value = input[name];
    if (value === undefined) {
      if (rule.default === undefined) problems.push(`${name}: required (${rule.description})`);
      else values[name] = rule.default;
      continue;
    }
    const problem = checkField(name, rule, value);
    if (problem) problems.push(problem);
    else values[name] = value as string | number | boolean;
  }
  for (const name of Object.keys(input)) {
    // Own keys only: `in` would take `constructor`, `toString`, `__proto__` for known fields.
    if (!Object.hasOwn(rules, name)) problems.push(`${name.length > SHOWN_MAX ? shownValue(name) : name}: unknown field (expected ${Object.keys(rules).join(', ')})`);
  }
  if (problems.length > 0) throw new HttpError(400, 'invalid_body', `invalid request body: ${problems.join('; ')}`);
  return values;
}
