import fc from 'fast-check';
import { expect, test } from 'vitest';
import {
  compareOutboxTokens,
  decodeOutboxToken,
  encodeOutboxToken,
  MAX_TOKEN_CHARS,
  mergeOutboxTokens,
  type OutboxTokenContents,
} from './consistency-token.js';
import { OutboxTokenError } from './errors.js';

const token = (table: string, ids: readonly number[], database = '7301/app') =>
  encodeOutboxToken({
    version: 1,
    database,
    outboxes: [{ table, tableOid: 16400, partitionColumn: 'resource_id', ids: ids.map(String) }],
  });

test('a token decodes to what was encoded, ids ascending, whatever their order and gaps', () => {
  fc.assert(
    fc.property(fc.uniqueArray(fc.integer({ min: 1, max: 5_000 }), { minLength: 1, maxLength: 300 }), (ids) => {
      const contents = decodeOutboxToken(token('vpc.outbox', ids));
      expect(contents.outboxes[0]?.ids).toEqual([...ids].sort((a, b) => a - b).map(String));
    }),
  );
});

test('ids of one enqueue (consecutive) stay small: a thousand of them in a few dozen characters', () => {
  const ids = Array.from({ length: 1_000 }, (_, i) => 9_000_000_000 + i);
  expect(token('vpc.outbox', ids).length).toBeLessThan(120);
});

test('merge unions the writes per outbox; compare says which covers which', () => {
  const a = token('vpc.outbox', [1, 2]);
  const b = token('vpc.outbox', [2, 3]);
  const c = token('compute.outbox', [9]);
  const ab = mergeOutboxTokens(a, b);
  expect(decodeOutboxToken(ab).outboxes[0]?.ids).toEqual(['1', '2', '3']);
  expect(mergeOutboxTokens(b, a)).toBe(ab);
  expect(compareOutboxTokens(ab, a)).toBe('covers');
  expect(compareOutboxTokens(a, ab)).toBe('covered');
  expect(compareOutboxTokens(a, b)).toBe('neither');
  expect(compareOutboxTokens(ab, mergeOutboxTokens(a, b, a))).toBe('equal');
  const abc = mergeOutboxTokens(ab, c);
  expect(decodeOutboxToken(abc).outboxes.map((o) => o.table)).toEqual(['compute.outbox', 'vpc.outbox']);
  expect(compareOutboxTokens(abc, c)).toBe('covers');
  expect(compareOutboxTokens(token('vpc.outbox', [1], '1/other'), a)).toBe('neither');
});

test('tokens of two databases do not merge', () => {
  const error = (() => {
    try {
      return mergeOutboxTokens(token('vpc.outbox', [1]), token('vpc.outbox', [1], '8/app'));
    } catch (e) {
      return e;
    }
  })();
  expect(error).toBeInstanceOf(OutboxTokenError);
  expect((error as OutboxTokenError).kind).toBe('other-database');
});

test('a token that would outgrow a header is refused when minted, not cut short', () => {
  const scattered = Array.from({ length: 2_000 }, (_, i) => 1_000_000 + i * 2);
  expect(() => token('vpc.outbox', scattered)).toThrow(new RegExp(`${MAX_TOKEN_CHARS} characters`));
});

test('what is not a token is malformed, with the reason', () => {
  const body = (value: unknown) => `ot1.${Buffer.from(JSON.stringify(value)).toString('base64url')}`;
  const contents: OutboxTokenContents = decodeOutboxToken(token('vpc.outbox', [4]));
  const cases: [unknown, RegExp][] = [
    [42, /expected a string/],
    ['zt9.abc', /start with "ot1."/],
    ['ot1.!!!', /base64url JSON/],
    [body({ o: [] }), /no database/],
    [body({ d: contents.database, o: [] }), /no outbox/],
    [body({ d: contents.database, o: [['vpc.outbox', 1, 'resource_id', '3,2']] }), /ascending/],
    [body({ d: contents.database, o: [['vpc.outbox', 1, 'resource_id', '0']] }), /bad id run/],
    [body({ d: contents.database, o: [['vpc.outbox; drop table x', 1, 'resource_id', '1']] }), /outbox 0: table/],
    [body({ d: contents.database, o: [['vpc.outbox', 1, 'resource_id', '1-100000']] }), /longer than a token carries/],
  ];
  for (const [value, message] of cases) {
    expect(() => decodeOutboxToken(value), String(value)).toThrow(message);
  }
});
