import { randomBytes } from 'node:crypto';
import { OpenFgaClient } from '@openfga/sdk';
import type { Sink } from '@outbox/drainer';
import type { IntentPayload } from '@outbox/outbox';
import {
  createDatabase,
  createOpenFgaStore,
  dropDatabase,
  stackInfo,
  startOpenFga,
  useOpenFgaStore,
  useTestDatabase,
  type OpenFgaServer,
} from '@outbox/test-stack';
import { storedOn, tupleKey } from '@outbox/test-stack/openfga';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createOpenFgaSink } from './openfga-sink.js';
import { keysDeletedLater, prepareIntents, tupleKeyId, withoutSupersededWrites, writeRequestBody } from './pack.js';
import { deletes, drainOnce, intent, kinds, noDeadline, outboxTables, sinkOn, writes } from './testing/fixtures.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);
const grant = (expires: string) => ({ name: 'non_expired_grant', context: { grant_expires_at: expires } });
const withCondition = (
  text: string,
  condition?: { name: string; context?: Record<string, unknown> },
): IntentPayload => ({
  writes: [{ ...tupleKey(text), ...(condition ? { condition } : {}) }],
});

/** The exact stored tuple on `object`, condition included, as OpenFGA reads it back. */
async function storedWithCondition(object: string): Promise<unknown[]> {
  const { tuples } = await fga.client.read({ object });
  return tuples.map((t) => ({
    user: t.key.user,
    relation: t.key.relation,
    object: t.key.object,
    condition: t.key.condition ?? undefined,
  }));
}

describe('replays are delivered, not poisoned', () => {
  test('replaying a delivered intent and deleting a tuple that is already gone are delivered (idempotent)', async () => {
    const sink = sinkOn(fga);
    const create = intent('vpc:replay', writes('user:cat owner vpc:replay', 'project:r project vpc:replay'));
    expect(kinds(await sink.deliver([create], noDeadline()))).toEqual(['delivered']);
    // A crash after OpenFGA accepted it but before sent_at was recorded: the drainer sends it again.
    expect(kinds(await sink.deliver([create], noDeadline()))).toEqual(['delivered']);
    expect(
      kinds(await sink.deliver([intent('vpc:replay', deletes('user:nobody owner vpc:replay'))], noDeadline())),
    ).toEqual(['delivered']);
    // Mixed: one half already there, one delete already gone, in one request.
    const mixed = intent('vpc:replay', {
      writes: [tupleKey('user:cat owner vpc:replay'), tupleKey('user:dan viewer vpc:replay')],
      deletes: [tupleKey('user:gone viewer vpc:replay')],
    });
    expect(kinds(await sink.deliver([mixed], noDeadline()))).toEqual(['delivered']);
    expect(await storedOn(fga.client, 'vpc:replay')).toEqual([
      'project:r project vpc:replay',
      'user:cat owner vpc:replay',
      'user:dan viewer vpc:replay',
    ]);
  });
});

describe('an at-least-once replay of a conditional write that a later intent deleted and rewrote', () => {
  // docs/openfga-sink.md §4: the drainer sends the same run again after its outcomes were lost.
  test.each([
    ['with a condition, then deleted and written without one', grant('2030-01-01T00:00:00Z'), undefined],
    ['without a condition, then deleted and written with one', undefined, grant('2030-01-01T00:00:00Z')],
    [
      'with a condition, then deleted and written with another context (a grant extended)',
      grant('2030-01-01T00:00:00Z'),
      grant('2031-01-01T00:00:00Z'),
    ],
  ])(
    'written %s: the replay of the whole run is delivered (not poisoned) and the store ends as the run says',
    async (_, first, last) => {
      const object = `project:replay${first ? 'c' : 'u'}${last ? (last.context.grant_expires_at.startsWith('2031') ? 'x' : 'c') : 'u'}`;
      const tuple = `user:rita viewer ${object}`;
      const run = [
        intent(object, withCondition(tuple, first)),
        intent(object, { deletes: [tupleKey(tuple)] }),
        intent(object, withCondition(tuple, last)),
      ];
      const sink = sinkOn(fga);
      expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
      // The replay: OpenFGA answers the first intent with 409 "different condition" (the tuple is the
      // third intent's now). The first intent's effect is erased by the second anyway.
      expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
      expect(await storedWithCondition(object)).toEqual([{ ...tupleKey(tuple), condition: last }]);
    },
  );

  test('a genuine conflict (no later intent of the partition deletes the key) is still permanent', async () => {
    await fga.client.write({
      writes: [{ ...tupleKey('user:rob viewer project:genuine'), condition: grant('2030-01-01T00:00:00Z') }],
    });
    const sink = sinkOn(fga);
    const outcomes = await sink.deliver(
      [
        intent('project:genuine', {
          writes: [tupleKey('user:rob viewer project:genuine'), tupleKey('user:rob editor project:genuine')],
        }),
        // Deletes another key: does not supersede the conflicting write.
        intent('project:genuine', { deletes: [tupleKey('user:rob editor project:genuine')] }),
      ],
      noDeadline(),
    );
    expect(outcomes[0]).toMatchObject({
      kind: 'permanent',
      error: expect.stringMatching(/^OpenFGA 409 Aborted: .*different condition/),
    });
    expect(outcomes[1]).toEqual({ kind: 'skipped' });
    expect(await storedWithCondition('project:genuine')).toEqual([
      { ...tupleKey('user:rob viewer project:genuine'), condition: grant('2030-01-01T00:00:00Z') },
    ]);
  });

  test('superseded writes are dropped only: the rest of the replayed intent still lands', async () => {
    const object = 'project:partial';
    const sink = sinkOn(fga);
    const run = [
      intent(object, {
        writes: [
          { ...tupleKey(`user:sue viewer ${object}`), condition: grant('2030-01-01T00:00:00Z') },
          tupleKey(`user:sue editor ${object}`),
        ],
      }),
      intent(object, { deletes: [tupleKey(`user:sue viewer ${object}`)] }),
      intent(object, withCondition(`user:sue viewer ${object}`)),
    ];
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    // Someone removed the editor tuple meanwhile: the replay of the first intent must put it back.
    await fga.client.write({ deletes: [tupleKey(`user:sue editor ${object}`)] });
    expect(kinds(await sink.deliver(run, noDeadline()))).toEqual(['delivered', 'delivered', 'delivered']);
    expect((await storedWithCondition(object)).length).toBe(2);
    expect(await storedWithCondition(object)).toContainEqual({
      ...tupleKey(`user:sue editor ${object}`),
      condition: undefined,
    });
  });

  test('through the real drainer: outcomes lost after OpenFGA applied the run (the process died before recording them) poison nothing on the replay', async () => {
    const spec = await outbox.fresh();
    const object = 'project:e2ereplay';
    const tuple = `user:tom viewer ${object}`;
    await outbox.enqueue(spec, [
      { partitionKey: object, payload: withCondition(tuple, grant('2030-01-01T00:00:00Z')) },
      { partitionKey: object, payload: { deletes: [tupleKey(tuple)] } },
      { partitionKey: object, payload: withCondition(tuple) },
    ]);
    // The sink delivers, then its outcomes are lost: the drainer counts the batch as failed.
    const real = sinkOn(fga);
    const losing: Sink = {
      deliver: async (intents, context) => {
        await real.deliver(intents, context);
        throw new Error('the process died before recording the outcomes');
      },
    };
    expect(await drainOnce(t, spec, losing, { backoff: { baseMs: 0, maxMs: 0 } })).toMatchObject({
      delivered: 0,
      retried: 1,
      released: 2,
    });
    expect(await storedWithCondition(object)).toEqual([{ ...tupleKey(tuple), condition: undefined }]);

    expect(await drainOnce(t, spec, sinkOn(fga), { backoff: { baseMs: 0, maxMs: 0 } })).toMatchObject({
      delivered: 3,
      poisoned: 0,
    });
    expect((await outbox.rows(spec)).every((row) => row.sent && row.attempt_count <= 1)).toBe(true);
    expect(await storedWithCondition(object)).toEqual([{ ...tupleKey(tuple), condition: undefined }]);
  });
});

describe('on the postgres datastore, the replay of a conditional write without a context', () => {
  // The stack's shared OpenFGA may run the memory datastore (in containers, or as the global setup
  // is told), which compares these equal; production runs postgres, which does not.
  const database = `fga_replay_${randomBytes(4).toString('hex')}`;
  let server: OpenFgaServer | undefined;
  beforeAll(async () => {
    server = await startOpenFga({
      datastore: 'postgres',
      datastoreUri: await createDatabase(stackInfo().postgresUrl, database),
    });
  });
  afterAll(async () => {
    await server?.stop();
    await dropDatabase(stackInfo().postgresUrl, database);
  });

  test('an intent writing a tuple with a condition and no context, delivered twice (at-least-once): delivered both times', async () => {
    const { apiUrl } = server as OpenFgaServer;
    const { storeId, authorizationModelId } = await createOpenFgaStore(apiUrl);
    const sink = createOpenFgaSink({ apiUrl, storeId, authorizationModelId });
    const grantWithoutContext = intent(
      'project:pgreplay',
      withCondition('user:vic viewer project:pgreplay', { name: 'non_expired_grant' }),
    );
    expect(await sink.deliver([grantWithoutContext], noDeadline())).toEqual([{ kind: 'delivered' }]);
    expect(await sink.deliver([grantWithoutContext], noDeadline())).toEqual([{ kind: 'delivered' }]);
    // A tuple stored by an earlier sink version (sent without a context) also matches the replay.
    const reader = new OpenFgaClient({ apiUrl, storeId, authorizationModelId });
    await reader.write({
      writes: [{ ...tupleKey('user:vic viewer project:pgold'), condition: { name: 'non_expired_grant' } }],
    });
    expect(
      await sink.deliver(
        [intent('project:pgold', withCondition('user:vic viewer project:pgold', { name: 'non_expired_grant' }))],
        noDeadline(),
      ),
    ).toEqual([{ kind: 'delivered' }]);
    // A different condition context is still a conflict.
    expect(
      kinds(
        await sink.deliver(
          [
            intent(
              'project:pgreplay',
              withCondition('user:vic viewer project:pgreplay', grant('2030-01-01T00:00:00Z')),
            ),
          ],
          noDeadline(),
        ),
      ),
    ).toEqual(['permanent']);
  });
});

describe('what makes a replay harmless, in the request', () => {
  test('writeRequestBody: a condition without a context is sent with context {} (a replay on the postgres datastore is then a duplicate, not a 409)', () => {
    const [item] = prepareIntents([
      intent('project:p', {
        writes: [{ ...tupleKey('user:1 viewer project:p'), condition: { name: 'non_expired_grant' } }],
      }),
    ]);
    expect(writeRequestBody([item!])).toEqual({
      writes: [
        {
          user: 'user:1',
          relation: 'viewer',
          object: 'project:p',
          condition: { name: 'non_expired_grant', context: {} },
        },
      ],
    });
  });

  test('keysDeletedLater: per intent, the keys a later intent of its own partition deletes', () => {
    const prepared = prepareIntents([
      intent('vpc:a', writes('user:1 owner vpc:a', 'user:2 owner vpc:a')),
      intent('vpc:b', deletes('user:2 owner vpc:a')), // another partition: does not count
      intent('vpc:a', deletes('user:1 owner vpc:a')),
      intent('vpc:a', writes('user:1 owner vpc:a')),
    ]);
    const later = keysDeletedLater(prepared);
    expect([...later.keys()]).toEqual([0]);
    expect([...(later.get(0) ?? [])]).toEqual([tupleKeyId(tupleKey('user:1 owner vpc:a'))]);
    const reduced = withoutSupersededWrites(prepared[0]!, later.get(0)!);
    expect(reduced?.writes).toEqual([tupleKey('user:2 owner vpc:a')]);
    expect(withoutSupersededWrites(prepared[3]!, later.get(0)!)?.writes).toEqual([]);
    expect(withoutSupersededWrites(prepared[1]!, later.get(0)!)).toBeUndefined();
  });
});
