import { defineOutbox, OutboxConfigError, type OutboxSpec, type OutboxSpecInput } from '@outbox/outbox';
import type { OutboxOwner } from '@outbox/reconciler';
import { CliError } from './cli-error.js';
import { EXIT } from './exit-codes.js';

/**
 * Where OpenFGA is, for `drain`, `audit`, `repair` and `doctor`. Every value may reference the
 * environment (`"$OPENFGA_STORE_ID"`, `"${OPENFGA_MODEL_ID:-}"`).
 */
export interface OpenFgaConfig {
  /** OpenFGA's HTTP API, e.g. `http://127.0.0.1:8080`. */
  readonly apiUrl: string;
  readonly storeId: string;
  /** The model the drain writes against. Default: the store's latest, as the services do. */
  readonly authorizationModelId?: string;
  /** The server's preshared key. Default none. Never printed. */
  readonly apiToken?: string;
}

/** What `doctor` compares the applied Kysely migrations with. */
export interface MigrationsCheck {
  /** Every migration name the code ships, e.g. `Object.keys(migrations)` from your migrations module. */
  readonly names: readonly string[];
  /** Kysely's bookkeeping table. Default `public.kysely_migration` (Kysely's own name). */
  readonly table?: string;
}

/**
 * One outbox of the config: its spec — the fields `defineOutbox` takes, or (in a `.ts`/`.mjs`
 * config) the spec object itself — its database, and for `audit`/`repair` its owner mapping.
 */
export type OutboxEntry = (OutboxSpecInput | { readonly spec: OutboxSpec }) & {
  /** Postgres URL of this outbox (env references allowed). Default: the config's `databaseUrl`. */
  readonly databaseUrl?: string;
  /** The owner mapping `audit` and `repair` compare OpenFGA with (an `OutboxOwner`; code configs only). Default none: those commands refuse. */
  readonly owner?: OutboxOwner;
};

/**
 * The `outbox` command line's config file (`outbox.config.ts`, `.mjs` or `.json`).
 *
 * @example
 * export default defineConfig({
 *   databaseUrl: '$DATABASE_URL',
 *   openfga: { apiUrl: '$OPENFGA_API_URL', storeId: '$OPENFGA_STORE_ID' },
 *   outboxes: { vpc: { spec: vpcOutbox, owner: registerServiceOwner(vpcService) } },
 * });
 */
export interface OutboxCliConfig {
  /** Postgres URL of every outbox that names none (env references allowed). */
  readonly databaseUrl?: string;
  /** Default none: the commands that need OpenFGA refuse without it. */
  readonly openfga?: OpenFgaConfig;
  /** Default none: `doctor` skips the migrations check (with a note). */
  readonly migrations?: MigrationsCheck;
  /** The outboxes by name; `--outbox NAME` picks some, default all, in this order. */
  readonly outboxes: Readonly<Record<string, OutboxEntry>>;
}

/**
 * Types a config in `outbox.config.ts` (it returns its argument unchanged).
 *
 * @example
 * export default defineConfig({ databaseUrl: '$DATABASE_URL', outboxes: { vpc: { spec: vpcOutbox } } });
 */
export function defineConfig(config: OutboxCliConfig): OutboxCliConfig {
  return config;
}

/** One outbox of a checked config: values still unexpanded (env references resolve when used). */
export interface ConfiguredOutbox {
  readonly name: string;
  readonly spec: OutboxSpec;
  readonly databaseUrl: string | undefined;
  /** The config field the database URL came from, for messages (`databaseUrl` or `outboxes.<name>.databaseUrl`). */
  readonly databaseUrlField: string;
  readonly owner: OutboxOwner | undefined;
  /** `--table` without `--max-attempts`: count with the value the table records, as the drainers do. */
  readonly maxAttemptsFromTable?: boolean;
}

/** A config that passed {@link checkConfig}. */
export interface CheckedConfig {
  /** Where it came from, for messages: a path, or `--table`. */
  readonly source: string;
  readonly outboxes: readonly ConfiguredOutbox[];
  readonly openfga: OpenFgaConfig | undefined;
  readonly migrations: { readonly names: readonly string[]; readonly table: string } | undefined;
}

const NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const SPEC_FIELDS = ['table', 'partitionColumn', 'channel', 'maxAttempts', 'supersededCoverageSql'] as const;
const ENTRY_FIELDS = new Set<string>([...SPEC_FIELDS, 'spec', 'databaseUrl', 'owner']);
const TOP_FIELDS = new Set(['databaseUrl', 'openfga', 'migrations', 'outboxes']);
const OPENFGA_FIELDS = new Set(['apiUrl', 'storeId', 'authorizationModelId', 'apiToken']);
const OWNER_FUNCTIONS = ['partitionOf', 'partitionFilter', 'expectedPage', 'partitions'] as const;

type Raw = Record<string, unknown>;
const isObject = (value: unknown): value is Raw => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Checks a loaded config, field by field; the first fault is a CliError naming it (exit 2). */
export function checkConfig(raw: unknown, source: string, options: { readonly codeConfig: boolean }): CheckedConfig {
  const fail = (field: string, message: string): never => {
    throw new CliError(`${source}: ${field}: ${message}`, undefined, EXIT.usage);
  };
  const string = (field: string, value: unknown, required: boolean): string | undefined => {
    if (value === undefined && !required) return undefined;
    if (typeof value !== 'string' || value.trim() === '')
      return fail(field, `expected a non-empty string, got ${JSON.stringify(value) ?? 'nothing'}`);
    return value;
  };
  const known = (field: string, value: Raw, fields: ReadonlySet<string>) => {
    const unknown = Object.keys(value).find((key) => !fields.has(key));
    if (unknown !== undefined)
      fail(field ? `${field}.${unknown}` : unknown, `unknown field (expected one of: ${[...fields].join(', ')})`);
  };

  if (!isObject(raw)) return fail('config', 'expected an object (the default export, or the JSON document)');
  known('', raw, TOP_FIELDS);
  const databaseUrl = string('databaseUrl', raw.databaseUrl, false);

  let openfga: OpenFgaConfig | undefined;
  if (raw.openfga !== undefined) {
    if (!isObject(raw.openfga)) fail('openfga', 'expected { apiUrl, storeId, authorizationModelId?, apiToken? }');
    const o = raw.openfga as Raw;
    known('openfga', o, OPENFGA_FIELDS);
    const authorizationModelId = string('openfga.authorizationModelId', o.authorizationModelId, false);
    const apiToken = string('openfga.apiToken', o.apiToken, false);
    openfga = {
      apiUrl: string('openfga.apiUrl', o.apiUrl, true) as string,
      storeId: string('openfga.storeId', o.storeId, true) as string,
      ...(authorizationModelId ? { authorizationModelId } : {}),
      ...(apiToken ? { apiToken } : {}),
    };
  }

  let migrations: CheckedConfig['migrations'];
  if (raw.migrations !== undefined) {
    const m = raw.migrations;
    if (!isObject(m) || !Array.isArray(m.names) || m.names.some((n) => typeof n !== 'string'))
      fail('migrations.names', 'expected an array of migration names');
    const names = (m as Raw).names as string[];
    const table = string('migrations.table', (m as Raw).table, false) ?? 'public.kysely_migration';
    if (!/^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/.test(table))
      fail('migrations.table', `expected "<schema>.<table>", got ${JSON.stringify(table)}`);
    migrations = { names, table };
  }

  if (!isObject(raw.outboxes) || Object.keys(raw.outboxes).length === 0)
    return fail(
      'outboxes',
      'expected an object naming at least one outbox, e.g. { "vpc": { "table": …, "partitionColumn": … } }',
    );
  const outboxes = Object.entries(raw.outboxes).map(([name, entry]): ConfiguredOutbox => {
    const field = `outboxes.${name}`;
    if (!NAME.test(name))
      fail(field, 'an outbox name is lower-case letters, digits, _, . and - (it is what --outbox takes)');
    if (!isObject(entry))
      return fail(field, 'expected an object with the spec fields (table, partitionColumn, …) or { spec }');
    known(field, entry, ENTRY_FIELDS);
    return {
      name,
      spec: checkSpec(field, entry, fail),
      databaseUrl: string(`${field}.databaseUrl`, entry.databaseUrl, false) ?? databaseUrl,
      databaseUrlField: entry.databaseUrl === undefined ? 'databaseUrl' : `${field}.databaseUrl`,
      owner:
        entry.owner === undefined ? undefined : checkOwner(`${field}.owner`, entry.owner, options.codeConfig, fail),
    };
  });
  for (const o of outboxes) {
    if (o.databaseUrl === undefined)
      fail(`outboxes.${o.name}.databaseUrl`, 'no database URL: set it here or the top-level databaseUrl');
  }
  return { source, outboxes, openfga, migrations };
}

function checkSpec(field: string, entry: Raw, fail: (field: string, message: string) => never): OutboxSpec {
  const given = entry.spec;
  const inline = SPEC_FIELDS.filter((key) => entry[key] !== undefined);
  if (given !== undefined && inline.length > 0)
    fail(`${field}.${inline[0]}`, 'give either spec or the spec fields, not both');
  if (given !== undefined && !isObject(given)) fail(`${field}.spec`, 'expected the OutboxSpec from defineOutbox()');
  const input = (given ?? entry) as Raw;
  try {
    // A spec object from defineOutbox passes again unchanged; anything else is checked as it would be there.
    return defineOutbox(
      Object.fromEntries(
        SPEC_FIELDS.filter((key) => input[key] !== undefined).map((key) => [key, input[key]]),
      ) as unknown as OutboxSpecInput,
    );
  } catch (error) {
    if (error instanceof OutboxConfigError)
      return fail(
        `${field}${given !== undefined ? '.spec' : ''}.${error.field}`,
        error.message.slice(error.field.length + 2),
      );
    throw error;
  }
}

function checkOwner(
  field: string,
  owner: unknown,
  codeConfig: boolean,
  fail: (field: string, message: string) => never,
): OutboxOwner {
  if (!codeConfig)
    fail(
      field,
      'an owner is code (an OutboxOwner from @outbox/reconciler): give it in outbox.config.ts or .mjs, not JSON',
    );
  if (!isObject(owner) || !Array.isArray(owner.objectTypes))
    fail(field, 'expected an OutboxOwner (objectTypes, partitionOf, partitionFilter, expectedPage, partitions)');
  const missing = OWNER_FUNCTIONS.find((name) => typeof (owner as Raw)[name] !== 'function');
  if (missing !== undefined)
    fail(`${field}.${missing}`, 'expected a function: an OutboxOwner as @outbox/reconciler defines it');
  return owner as unknown as OutboxOwner;
}
