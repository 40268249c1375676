import { OutboxConfigError } from '@outbox/outbox';
import { DiscardRefusedError } from '@outbox/reconciler';
import { describe, expect, test } from 'vitest';
import { CliError } from './cli-error.js';
import { EXIT } from './exit-codes.js';
import { explainError } from './explain-error.js';

// How a thrown error becomes the exit code: the cases a live test cannot provoke here without
// the network (a name that does not resolve, a timeout) are built as Node and pg build them.
const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });

describe('explainError', () => {
  test.each([
    ['a name that does not resolve', withCode('getaddrinfo ENOTFOUND db.internal', 'ENOTFOUND')],
    ['a connect timeout', withCode('connect ETIMEDOUT 10.0.0.5:5432', 'ETIMEDOUT')],
    ["pg's connection timeout (no code)", new Error('timeout expired')],
    [
      'both addresses refused (Node wraps them in an AggregateError)',
      new AggregateError(
        [
          withCode('connect ECONNREFUSED ::1:5432', 'ECONNREFUSED'),
          withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'),
        ],
        '',
      ),
    ],
    [
      'a refusal wrapped as a cause',
      new Error('query failed', { cause: withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED') }),
    ],
    [
      "the OpenFGA SDK's network error",
      Object.assign(new Error('FGA Error: connect ECONNREFUSED'), { name: 'FgaError' }),
    ],
    ['a server starting up (57P03)', withCode('the database system is starting up', '57P03')],
  ])('%s is exit 3', (_what, error) => {
    expect(explainError(error).exitCode).toBe(EXIT.unreachable);
  });

  test.each([
    ['a refused login', withCode('password authentication failed for user "operator"', '28P01')],
    ['a database that does not exist', withCode('database "platfrom" does not exist', '3D000')],
    ['a missing table', withCode('relation "vpc.fga_register_outbox" does not exist', '42P01')],
    ['a config error of the libraries', new OutboxConfigError('partitionColumn', 'is required')],
  ])('%s is exit 2', (_what, error) => {
    expect(explainError(error).exitCode).toBe(EXIT.usage);
  });

  test('a refused discard is exit 1, its hint naming what to do with the ids refused (in-flight needs a drainer mid-claim)', () => {
    const refused = explainError(
      new DiscardRefusedError('vpc.fga_register_outbox', [
        { id: '3', refusal: 'in-flight' },
        { id: '4', refusal: 'superseded' },
      ]),
    );
    expect(refused.exitCode).toBe(EXIT.problem);
    expect(refused.line('outbox')).toBe(
      'outbox: discard on vpc.fga_register_outbox changed nothing: not discardable: 3 in-flight, 4 superseded ' +
        '(discard only poisoned rows no delivered successor covers; retire the superseded ones; retry the in-flight ones in a moment: a drainer holds their partition)',
    );
  });

  test('anything else is exit 1 and says it is unexpected; a CliError is kept as it is', () => {
    const unexpected = explainError(new TypeError('x is not a function'));
    expect(unexpected.exitCode).toBe(EXIT.problem);
    expect(unexpected.line('outbox')).toBe(
      'outbox: unexpected error: x is not a function (set OUTBOX_DEBUG=1 for the stack)',
    );
    const own = new CliError('no row 7', 'see list', EXIT.problem);
    expect(explainError(own)).toBe(own);
  });
});
