/**
 * `pnpm migrate [--sql-only]`: applies every migration to DATABASE_URL, then loads the
 * authorization model (`migrations/fga/model.fga`) into the OpenFGA store, and prints the ids the
 * services need. The variables are in {@link ENVIRONMENT}.
 *
 * The model is written only when it differs from the store's latest one (OpenFGA models are
 * immutable: every write is a new id, and services pin the id they were given).
 *
 * The command line of @outbox/cli's discipline and exit codes: `--help`; an unknown flag, or a
 * variable unset, malformed or naming a store that is not there, is one line and exit 2 (a mistyped
 * `--sql-onyl` must not migrate the lot); a failure once it runs is one line and exit 1, or 3 when
 * Postgres or OpenFGA does not answer.
 */
import { CredentialsMethod, FgaApiNotFoundError, OpenFgaClient, type AuthorizationModel } from '@openfga/sdk';
import {
  CliError,
  createCommandLine,
  EXIT,
  exitWith,
  isUnreachable,
  maskUrl,
  networkReason,
  processIo,
  runCommandLine,
} from '@outbox/cli';
import { transformer } from '@openfga/syntax-transformer';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { authorizationModel, writeAuthorizationModel } from './authorization-model.js';
import { MigrationError, migrateToLatest } from './migrate.js';

const ENVIRONMENT = `Environment:
  DATABASE_URL        required
  OPENFGA_API_URL     required unless --sql-only
  OPENFGA_STORE_ID    optional: when unset, the store named "outbox" (created on the first run)
  OPENFGA_API_TOKEN   optional: preshared key of the OpenFGA server`;

/** A failure of this command once it runs: one line, exit 1. */
const failure = (message: string, hint?: string, cause?: unknown) =>
  new CliError(message, hint, EXIT.problem, { cause });
/** A variable unset or malformed: one line, exit 2 (the variables are read before anything changes). */
const badVariable = (message: string, hint?: string) => new CliError(message, hint, EXIT.usage);

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw badVariable(`${name} is not set`, 'export it; see "pnpm migrate" in services/README.md');
  return value;
}

/** DATABASE_URL, checked before anything is changed (pg reads a bare word as a socket path); printed masked only. */
function databaseUrlFrom(name: string): string {
  const value = required(name);
  if (!/^postgres(ql)?:\/\//.test(value))
    throw badVariable(
      `${name} is not a postgres:// URL: ${maskUrl(value)}`,
      'e.g. postgres://user:password@127.0.0.1:5432/outbox',
    );
  return value;
}

/** `record` with its keys sorted (OpenFGA returns relation and condition maps in its own order). */
function sorted<T>(record: Record<string, T> | undefined): Record<string, T> | undefined {
  return record && Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
}

/** The model rendered as DSL with its maps in one order: equal text, equal model (ids and metadata aside). */
function canonicalDsl(model: Omit<AuthorizationModel, 'id'>): string {
  return transformer.transformJSONToDSL({
    ...model,
    type_definitions: model.type_definitions.map((t) => ({
      ...t,
      relations: sorted(t.relations),
      ...(t.metadata ? { metadata: { ...t.metadata, relations: sorted(t.metadata.relations) } } : {}),
    })),
    conditions: sorted(model.conditions),
  });
}

function sameModel(a: Omit<AuthorizationModel, 'id'>, b: Omit<AuthorizationModel, 'id'>): boolean {
  try {
    return canonicalDsl(a) === canonicalDsl(b);
  } catch {
    return false; // unreadable: write ours, a new id is harmless
  }
}

async function migrateSql(databaseUrl: string): Promise<void> {
  const db = new Kysely<unknown>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: databaseUrl, max: 1 }) }),
  });
  try {
    const applied = await migrateToLatest(db);
    console.log(applied.length > 0 ? `applied ${applied.join(', ')}` : 'database already up to date');
  } finally {
    await db.destroy();
  }
}

const STORE_NAME = 'outbox';

/**
 * Without OPENFGA_STORE_ID: the store named `outbox`, created on the first run and found again on
 * the next ones (a second run must not leave a second store behind). Several of that name: refuse
 * to guess.
 */
async function outboxStore(admin: OpenFgaClient, apiUrl: string): Promise<string> {
  const named: string[] = [];
  let continuationToken: string | undefined;
  do {
    const page = await admin.listStores({ pageSize: 100, ...(continuationToken ? { continuationToken } : {}) });
    named.push(...page.stores.filter((store) => store.name === STORE_NAME).map((store) => store.id));
    continuationToken = page.continuation_token || undefined;
  } while (continuationToken);
  if (named.length > 1) {
    throw failure(
      `OpenFGA at ${apiUrl} has ${named.length} stores named "${STORE_NAME}" (${named.join(', ')})`,
      'set OPENFGA_STORE_ID to the one to use',
    );
  }
  if (named.length === 1) {
    console.log(`using store ${named[0]} (named "${STORE_NAME}")`);
    return named[0] as string;
  }
  const { id } = await admin.createStore({ name: STORE_NAME });
  console.log(`created store ${id}`);
  return id;
}

async function loadModel(apiUrl: string): Promise<{ storeId: string; modelId: string }> {
  const token = process.env.OPENFGA_API_TOKEN;
  const credentials = token ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token } } } : {};
  let storeId = process.env.OPENFGA_STORE_ID;
  if (!storeId) storeId = await outboxStore(new OpenFgaClient({ apiUrl, ...credentials }), apiUrl);
  const client = new OpenFgaClient({ apiUrl, storeId, ...credentials });
  // A stale id (an in-memory OpenFGA restarted, say) must fail here, not print ids nobody can use.
  try {
    await client.getStore();
  } catch (error) {
    // The variable names a store that is not there: configuration, like a wrong password.
    if (error instanceof FgaApiNotFoundError)
      throw new CliError(
        `OpenFGA at ${apiUrl} has no store ${storeId} (OPENFGA_STORE_ID)`,
        `unset it to use (or create) the store named "${STORE_NAME}"`,
        EXIT.usage,
        { cause: error },
      );
    throw error;
  }
  const wanted = authorizationModel() as unknown as Omit<AuthorizationModel, 'id'>;
  const latest = (await client.readLatestAuthorizationModel()).authorization_model;
  if (latest && sameModel(latest, wanted)) {
    console.log(`authorization model unchanged (${latest.id})`);
    return { storeId, modelId: latest.id };
  }
  const modelId = await writeAuthorizationModel(client);
  console.log(
    `wrote authorization model ${modelId}${latest ? ` (was ${latest.id}: run iam's onModelChanged / send it SIGHUP)` : ''}`,
  );
  return { storeId, modelId };
}

/** OPENFGA_API_URL, checked before anything is changed (the SDK's own error for a bad one says only "FGA Error"). */
function apiUrlFrom(name: string): string {
  const value = required(name);
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw badVariable(`${name} is not an http(s) URL: ${JSON.stringify(value)}`, 'e.g. http://127.0.0.1:8080');
  }
  // The SDK appends `/stores/…` as is, and OpenFGA answers 404 to `//stores/…`.
  return value.replace(/\/+$/, '');
}

/** OPENFGA_STORE_ID, when set, must be a ULID (the SDK refuses anything else, but only once the SQL has been migrated). */
function storeIdFrom(name: string): void {
  const value = process.env[name];
  if (value && !/^[0-7][0-9A-HJKMNP-TV-Z]{25}$/.test(value)) {
    throw badVariable(`${name} is not an OpenFGA store id (a 26-character ULID): ${JSON.stringify(value)}`);
  }
}

/**
 * Runs `work` holding a session advisory lock of the database: two `pnpm migrate` at once (replicas
 * of a deployment, say) then take turns at OpenFGA too, as they do at the SQL migrations. Without
 * it both could find no store named "outbox" and create one each: the two print different store
 * ids, and every later run refuses the two stores of one name.
 */
async function serialised<T>(databaseUrl: string, work: () => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`select pg_advisory_lock(hashtextextended('@outbox/migrations pnpm migrate: OpenFGA', 0))`);
    return await work();
  } finally {
    await client.end(); // ends the session, and with it the lock
  }
}

async function migrate(options: { readonly sqlOnly?: boolean }): Promise<void> {
  const sqlOnly = options.sqlOnly === true;
  // Every variable is read and checked before anything is changed (whether the store exists is known only later).
  const databaseUrl = databaseUrlFrom('DATABASE_URL');
  const apiUrl = sqlOnly ? undefined : apiUrlFrom('OPENFGA_API_URL');
  if (!sqlOnly) storeIdFrom('OPENFGA_STORE_ID');
  try {
    await migrateSql(databaseUrl);
  } catch (error) {
    if (isUnreachable(error))
      throw new CliError(
        `Postgres at ${maskUrl(databaseUrl)} did not answer: ${networkReason(error)}`,
        'is it running, and is DATABASE_URL right?',
        EXIT.unreachable,
        { cause: error },
      );
    if (error instanceof MigrationError) throw failure(error.message, undefined, error);
    throw error;
  }
  if (apiUrl === undefined) return;
  const { storeId, modelId } = await serialised(databaseUrl, () => loadModel(apiUrl));
  console.log(`\nexport OPENFGA_STORE_ID=${storeId}\nexport OPENFGA_MODEL_ID=${modelId}`);
}

const io = processIo();
const box = { code: EXIT.ok as (typeof EXIT)[keyof typeof EXIT] };
const program = createCommandLine(
  'migrate',
  'Applies every migration to DATABASE_URL, then loads the authorization model into the OpenFGA store and prints the ids the services need.',
  io,
)
  .option('--sql-only', 'apply the SQL migrations only; leave OpenFGA alone')
  .addHelpText('after', `\n${ENVIRONMENT}`)
  .action(
    exitWith(box, async (options: { sqlOnly?: boolean }) => {
      await migrate(options);
      return EXIT.ok;
    }),
  );
process.exitCode = await runCommandLine(program, process.argv.slice(2), io, box);
