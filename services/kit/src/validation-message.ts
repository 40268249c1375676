import { HttpError } from './errors.js';
import { shownValue, type FormatCheck } from './field-schemas.js';

/** One error of the schema validator (ajv, with `verbose` on: it carries the failing value and its schema). */
export interface SchemaError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly message?: string;
  readonly parentSchema?: Readonly<Record<string, unknown>>;
  readonly data?: unknown;
}

/** Where in the request the failing value was, as fastify names it. */
export type SchemaErrorPart = 'body' | 'params' | 'querystring' | 'headers';

/** The first of these that fails is the one a field's problem names (a wrong type says more than a wrong pattern). */
const KEYWORD_ORDER = [
  'type',
  'required',
  'additionalProperties',
  'maxLength',
  'minLength',
  'enum',
  'pattern',
  'format',
  'minimum',
  'maximum',
  'uniqueItems',
  'maxItems',
];

/** At most this many problems are listed in one message: a body of 10,000 unknown keys is a 400, not a 1 MB one. */
const PROBLEMS_MAX = 10;

const description = (schema: Readonly<Record<string, unknown>> | undefined): string | undefined =>
  typeof schema?.description === 'string' ? schema.description : undefined;

const propertiesOf = (
  schema: Readonly<Record<string, unknown>> | undefined,
): Readonly<Record<string, Record<string, unknown>>> =>
  (schema?.properties ?? {}) as Readonly<Record<string, Record<string, unknown>>>;

/** `/relations/0` → `relations[0]`; a key too long to repeat is quoted short. */
function fieldName(instancePath: string, property?: unknown): string {
  const segments = instancePath.split('/').slice(1);
  if (typeof property === 'string') segments.push(property);
  const shown = segments.map((s) => (s.length > 80 ? shownValue(s) : s.replaceAll('~1', '/').replaceAll('~0', '~')));
  return shown.map((s, i) => (i > 0 && /^\d+$/.test(s) ? `[${s}]` : i > 0 ? `.${s}` : s)).join('');
}

/** What is wrong with the value `error` is about, in the words the services have always used. */
function problemOf(error: SchemaError, formats: Readonly<Record<string, FormatCheck>>): string {
  const schema = error.parentSchema;
  const about = description(schema);
  const got = shownValue(error.data);
  switch (error.keyword) {
    case 'type': {
      const type = String(error.params.type);
      if (type === 'string') return `expected a string${about ? ` (${about})` : ''}, got ${got}`;
      if (type === 'integer') return `expected an integer${about ? ` (${about})` : ''}, got ${got}`;
      if (type === 'boolean') return `expected true or false, got ${got}`;
      if (type === 'array') return `expected an array${about ? ` (${about})` : ''}, got ${got}`;
      if (type === 'object') return `expected a JSON object with ${Object.keys(propertiesOf(schema)).join(', ')}`;
      return `expected ${type}, got ${got}`;
    }
    case 'required': {
      const what = description(propertiesOf(schema)[String(error.params.missingProperty)]);
      return `required${what ? ` (${what})` : ''}`;
    }
    case 'additionalProperties':
      return `unknown field (expected ${Object.keys(propertiesOf(schema)).join(', ')})`;
    case 'maxLength':
      return `longer than ${String(error.params.limit)} characters`;
    case 'minLength':
      return `shorter than ${String(error.params.limit)} characters`;
    case 'enum':
      return `expected one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}, got ${got}`;
    case 'pattern':
      return `expected ${about ?? `a value matching ${String(error.params.pattern)}`}, got ${got}`;
    case 'format': {
      const check = formats[String(error.params.format)];
      return (
        (typeof error.data === 'string' ? check?.(error.data) : undefined) ??
        `expected ${about ?? String(error.params.format)}, got ${got}`
      );
    }
    case 'minimum':
    case 'maximum': {
      const range = `${String(schema?.minimum ?? '-∞')} to ${String(schema?.maximum ?? '∞')}`;
      return `expected ${about ? `${about} (${range})` : range}, got ${got}`;
    }
    case 'uniqueItems':
      return `${shownValue((error.data as unknown[])[error.params.i as number])} is listed twice`;
    default:
      return error.message ?? `failed ${error.keyword}`;
  }
}

/**
 * The 400 a request that failed its route's schema gets: `invalid_body` listing every problem
 * (`invalid request body: name: expected …; colour: unknown field …`), `invalid_query`, or
 * `invalid_<param>` for a path parameter. One problem per field (the most telling), at most ten.
 *
 * @example
 * throw validationHttpError(error.validation, error.validationContext, formats);
 */
export function validationHttpError(
  errors: readonly SchemaError[],
  part: SchemaErrorPart,
  formats: Readonly<Record<string, FormatCheck>> = {},
): HttpError {
  const rank = (e: SchemaError) =>
    KEYWORD_ORDER.includes(e.keyword) ? KEYWORD_ORDER.indexOf(e.keyword) : KEYWORD_ORDER.length;
  const byField = new Map<string, SchemaError>();
  for (const error of errors) {
    const field = fieldName(error.instancePath, error.params.missingProperty ?? error.params.additionalProperty);
    const kept = byField.get(field);
    if (!kept || rank(error) < rank(kept)) byField.set(field, error);
  }
  const entries = [...byField.entries()];
  const listed = entries
    .slice(0, PROBLEMS_MAX)
    .map(([field, error]) => ({ field, problem: problemOf(error, formats) }));
  const more = entries.length > PROBLEMS_MAX ? `; and ${entries.length - PROBLEMS_MAX} more` : '';
  const problems = listed.map(({ field, problem }) => (field ? `${field}: ${problem}` : problem)).join('; ') + more;

  if (part === 'params') {
    const [first] = listed;
    const about = description(byField.get(first?.field ?? '')?.parentSchema);
    return new HttpError(
      400,
      `invalid_${first?.field || 'path'}`,
      `the ${first?.field || 'path'} in the path should be ${about ?? problems}`,
    );
  }
  if (part === 'querystring') return new HttpError(400, 'invalid_query', problems);
  // The whole body of the wrong shape says only that (the old validator's wording).
  if (listed.length === 1 && listed[0]?.field === '' && byField.get('')?.keyword === 'type')
    return new HttpError(400, 'invalid_body', problems);
  if (part === 'body') return new HttpError(400, 'invalid_body', `invalid request body: ${problems}`);
  return new HttpError(400, 'invalid_request', `invalid request ${part}: ${problems}`);
}
