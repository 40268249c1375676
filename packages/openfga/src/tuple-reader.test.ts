import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpenFgaClient } from '@openfga/sdk';
import { OutboxConfigError, type TupleKey } from '@outbox/outbox';
import { openFgaClientConfig, useOpenFgaStore } from '@outbox/test-stack';
import { beforeAll, describe, expect, test } from 'vitest';
import { createOpenFgaTupleReader, OpenFgaReadError, type OpenFgaTupleReader } from './index.js';

const fga = useOpenFgaStore();
let reader: OpenFgaTupleReader;

const vpcTuples = (n: number): TupleKey[] =>
  Array.from({ length: n }, (_, i) => ({
    user: `user:u${i}`,
    relation: 'owner',
    object: `vpc:v${String(i).padStart(3, '0')}`,
  }));
const conditioned: TupleKey = {
  user: 'user:carol',
  relation: 'viewer',
  object: 'project:p1',
  condition: { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } },
};
const id = (t: TupleKey) => `${t.user} ${t.relation} ${t.object}`;

async function write(tuples: readonly TupleKey[]): Promise<void> {
  for (let from = 0; from < tuples.length; from += 100)
    await fga.client.write({ writes: tuples.slice(from, from + 100) as TupleKey[] });
}

let startedAt: Date;
beforeAll(async () => {
  startedAt = new Date(Date.now() - 60_000);
  reader = createOpenFgaTupleReader({ client: new OpenFgaClient(openFgaClientConfig(fga.storeId)) });
  await write(vpcTuples(150));
  await write([
    { user: 'project:p1', relation: 'project', object: 'vpc:v000' },
    { user: 'user:bob', relation: 'owner', object: 'bucket:b1' },
    conditioned,
  ]);
});

describe('createOpenFgaTupleReader', () => {
  test('readObjectTypes pages through the store and returns the tuples of the types asked, conditions included', async () => {
    const seen: TupleKey[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      const page = await reader.readObjectTypes(['vpc', 'project'], token);
      seen.push(...page.tuples);
      token = page.continuationToken;
      pages += 1;
    } while (token);
    expect(pages).toBeGreaterThanOrEqual(2); // 153 tuples in the store, 100 a page
    expect(seen).toHaveLength(152);
    expect(seen.some((t) => t.object.startsWith('bucket:'))).toBe(false);
    expect(seen.find((t) => t.object === 'project:p1')).toEqual(conditioned);
    expect(seen.find((t) => t.object === 'vpc:v001')).toEqual({
      user: 'user:u1',
      relation: 'owner',
      object: 'vpc:v001',
    });
  });

  test('readTuples reads one object, or one subject on it', async () => {
    const object = await reader.readTuples({ object: 'vpc:v000' }, undefined);
    expect(object.tuples.map(id).sort()).toEqual(['project:p1 project vpc:v000', 'user:u0 owner vpc:v000']);
    expect(object.continuationToken).toBeUndefined();
    const subject = await reader.readTuples({ object: 'vpc:v000', user: 'project:p1' }, undefined);
    expect(subject.tuples.map(id)).toEqual(['project:p1 project vpc:v000']);
    expect((await reader.readTuples({ object: 'vpc:none' }, undefined)).tuples).toEqual([]);
  });

  test('readChanges pages a type from a start time; its token comes back unchanged until the next change, then reads only that', async () => {
    const changed: string[] = [];
    let from: { continuationToken?: string; startTime?: Date } = { startTime: startedAt };
    let token: string | undefined;
    for (;;) {
      const page = await reader.readChanges('vpc', from);
      changed.push(...page.changes.map((c) => `${c.operation} ${id(c.tuple)}`));
      if (page.changes.length === 0) break;
      token = page.continuationToken;
      from = { continuationToken: token as string };
    }
    expect(changed).toHaveLength(151);
    expect(changed).toContain('write user:u149 owner vpc:v149');
    expect(await reader.readChanges('vpc', { continuationToken: token as string })).toEqual({
      changes: [],
      continuationToken: token,
    });

    await fga.client.write({ deletes: [{ user: 'user:u5', relation: 'owner', object: 'vpc:v005' }] });
    const next = await reader.readChanges('vpc', { continuationToken: token as string });
    expect(next.changes.map((c) => `${c.operation} ${id(c.tuple)}`)).toEqual(['delete user:u5 owner vpc:v005']);
    expect(next.changes[0]?.timestamp).toBeInstanceOf(Date);
    // A type with no change after the start time: no token to store.
    expect(await reader.readChanges('instance', { startTime: startedAt })).toEqual({
      changes: [],
      continuationToken: undefined,
    });
  });

  test('a failed read is an OpenFgaReadError with what OpenFGA said; bad config names the field', async () => {
    // OpenFGA refuses a Read of a whole type without a user (why readObjectTypes reads the store).
    const error = await reader.readTuples({ object: 'vpc:' }, undefined).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenFgaReadError);
    expect(error).toMatchObject({ status: 400, code: 'validation_error' });
    expect((error as OpenFgaReadError).message).toMatch(/^OpenFGA Read of vpc: failed \(400 validation_error\): /);
    expect(() => createOpenFgaTupleReader({ apiUrl: '', storeId: fga.storeId })).toThrow(OutboxConfigError);
    expect(() => createOpenFgaTupleReader({ client: {} as never })).toThrow(/read and readChanges/);
    expect(() => createOpenFgaTupleReader({ client: fga.client, timeoutMs: 0 })).toThrow(/timeoutMs/);
  });

  test('a read OpenFGA never answers fails after timeoutMs instead of hanging the audit', async () => {
    const silent = createServer(() => undefined); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const stuck = createOpenFgaTupleReader({
        apiUrl: `http://127.0.0.1:${port}`,
        storeId: fga.storeId,
        timeoutMs: 300,
      });
      const started = Date.now();
      await expect(stuck.readChanges('vpc', { startTime: startedAt })).rejects.toThrow(
        /ReadChanges of vpc did not answer within 300 ms/,
      );
      expect(Date.now() - started).toBeLessThan(3_000);
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
