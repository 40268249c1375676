import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import {
  ConsistencyPreference,
  CredentialsMethod,
  OpenFgaClient,
  type WriteAuthorizationModelRequest,
} from '@openfga/sdk';
import { transformer } from '@openfga/syntax-transformer';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest';

// Runs migrations/fga/model.fga.yaml, a store file in the format of OpenFGA's `fga model test`, on
// the real OpenFGA server of the test stack: its model (model_file) and tuples go into a fresh
// store, then every check and list_objects assertion is asked of the server. A differing answer
// fails the test naming the assertion, so this and `fga model test --tests model.fga.yaml` agree.
// (This package cannot depend on @outbox/test-stack, hence inject.)

const STORE_FILE = new URL('../fga/model.fga.yaml', import.meta.url);

interface StoreTuple {
  readonly user: string;
  readonly relation: string;
  readonly object: string;
  readonly condition?: { readonly name: string; readonly context?: Record<string, unknown> };
}
interface CheckAssertions {
  readonly user: string;
  readonly object: string;
  readonly context?: Record<string, unknown>;
  readonly assertions: Readonly<Record<string, boolean>>;
}
interface ListObjectsAssertions {
  readonly user: string;
  readonly type: string;
  readonly context?: Record<string, unknown>;
  readonly assertions: Readonly<Record<string, readonly string[]>>;
}
interface StoreTest {
  readonly name?: string;
  readonly tuples?: readonly StoreTuple[];
  readonly check?: readonly CheckAssertions[];
  readonly list_objects?: readonly ListObjectsAssertions[];
}
interface StoreFile {
  readonly name?: string;
  readonly model?: string;
  readonly model_file?: string;
  readonly tuples?: readonly StoreTuple[];
  readonly tests: readonly StoreTest[];
}

/** The keys this runner understands; any other (tuple_file, list_users…) fails rather than go untested. */
const SUPPORTED = {
  file: ['name', 'model', 'model_file', 'tuples', 'tests'],
  test: ['name', 'tuples', 'check', 'list_objects'],
};

function loadStoreFile(url: URL): { file: StoreFile; model: WriteAuthorizationModelRequest } {
  const file = parse(readFileSync(url, 'utf8')) as StoreFile;
  const unknown = [
    ...Object.keys(file).filter((k) => !SUPPORTED.file.includes(k)),
    ...file.tests.flatMap((t, i) =>
      Object.keys(t)
        .filter((k) => !SUPPORTED.test.includes(k))
        .map((k) => `tests[${i}].${k}`),
    ),
  ];
  if (unknown.length > 0) throw new Error(`${url.pathname}: this runner does not support ${unknown.join(', ')}`);
  const dsl = file.model ?? readFileSync(new URL(file.model_file ?? '', url), 'utf8');
  return { file, model: transformer.transformDSLToJSONObject(dsl) as unknown as WriteAuthorizationModelRequest };
}

const shown = (context?: Record<string, unknown>) => (context ? ` with context ${JSON.stringify(context)}` : '');

/** Asks the server every assertion of `storeTest`; returns one line per assertion it answered otherwise. */
async function run(client: OpenFgaClient, storeTest: StoreTest): Promise<string[]> {
  const options = { consistency: ConsistencyPreference.HigherConsistency };
  const failures: string[] = [];
  const asked = async (what: string, expected: unknown, ask: () => Promise<unknown>) => {
    try {
      const got = await ask();
      if (JSON.stringify(got) !== JSON.stringify(expected))
        failures.push(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
    } catch (error) {
      failures.push(
        `${what}: expected ${JSON.stringify(expected)}, got an error: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  };
  for (const { user, object, context, assertions } of storeTest.check ?? []) {
    for (const [relation, expected] of Object.entries(assertions)) {
      await asked(
        `check ${user} ${relation} ${object}${shown(context)}`,
        expected,
        async () =>
          (await client.check({ user, relation, object, ...(context ? { context } : {}) }, options)).allowed === true,
      );
    }
  }
  for (const { user, type, context, assertions } of storeTest.list_objects ?? []) {
    for (const [relation, expected] of Object.entries(assertions)) {
      await asked(`list_objects ${user} ${relation} ${type}${shown(context)}`, [...expected].sort(), async () =>
        (await client.listObjects({ user, relation, type, ...(context ? { context } : {}) }, options)).objects.sort(),
      );
    }
  }
  return failures;
}

async function writeTuples(
  client: OpenFgaClient,
  tuples: readonly StoreTuple[],
  how: 'writes' | 'deletes',
): Promise<void> {
  for (let i = 0; i < tuples.length; i += 100) {
    const chunk = tuples.slice(i, i + 100);
    await client.write(
      how === 'writes'
        ? { writes: [...chunk] }
        : { deletes: chunk.map(({ user, relation, object }) => ({ user, relation, object })) },
    );
  }
}

const { file, model } = loadStoreFile(STORE_FILE);
let client: OpenFgaClient;

beforeAll(async () => {
  const stack = inject('outboxStack');
  const credentials = stack.openfgaPresharedKey
    ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token: stack.openfgaPresharedKey } } }
    : {};
  const { id: storeId } = await new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, ...credentials }).createStore({
    name: `model-test-${randomBytes(4).toString('hex')}`,
  });
  const scoped = new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, storeId, ...credentials });
  const { authorization_model_id: authorizationModelId } = await scoped.writeAuthorizationModel(model);
  client = new OpenFgaClient({ apiUrl: stack.openfgaApiUrl, storeId, authorizationModelId, ...credentials });
  await writeTuples(client, file.tuples ?? [], 'writes');
});
afterAll(async () => {
  await client?.deleteStore().catch(() => undefined);
});

describe(`${file.name ?? 'store file'} (migrations/fga/model.fga.yaml)`, () => {
  test.each(file.tests.map((t, i) => [t.name ?? `tests[${i}]`, t] as const))('%s', async (_name, storeTest) => {
    await writeTuples(client, storeTest.tuples ?? [], 'writes');
    try {
      expect(await run(client, storeTest)).toEqual([]);
    } finally {
      await writeTuples(client, storeTest.tuples ?? [], 'deletes');
    }
  });

  test('asserts every relation of every type of the model at least once allowed and once denied', () => {
    const asserted = new Map<string, Set<boolean>>();
    for (const { object, assertions } of file.tests.flatMap((t) => t.check ?? [])) {
      for (const [relation, expected] of Object.entries(assertions)) {
        const key = `${object.split(':')[0]}#${relation}`;
        asserted.set(key, (asserted.get(key) ?? new Set()).add(expected));
      }
    }
    const missing = model.type_definitions.flatMap(({ type, relations }) =>
      Object.keys(relations ?? {}).flatMap((relation) =>
        [true, false]
          .filter((verdict) => !asserted.get(`${type}#${relation}`)?.has(verdict))
          .map((verdict) => `${type}#${relation} ${verdict ? 'allowed' : 'denied'}`),
      ),
    );
    expect(missing).toEqual([]);
  });
});

test('the runner reports an assertion the server answers otherwise, naming it', async () => {
  const wrong: StoreTest = {
    check: [{ user: 'user:sam', object: 'organization:acme', assertions: { member: true } }],
    list_objects: [{ user: 'user:adam', type: 'organization', assertions: { owner: ['organization:acme'] } }],
  };
  expect(await run(client, wrong)).toEqual([
    'check user:sam member organization:acme: expected true, got false',
    'list_objects user:adam owner organization: expected ["organization:acme"], got []',
  ]);
});
