import { describe, expect, test } from 'vitest';
import { actionsLogDdlV1 } from './actions-log-ddl.js';
import { defineOutbox } from '../define-outbox.js';
import { drainFunctionsDdl, type DrainFunctionVersions } from './drain-functions.js';
import { enqueueFunctionDdl } from './enqueue-function.js';
import { ledgerLifeDdlV1 } from './ledger-life-ddl.js';
import { lateWriteVerificationDdl } from './late-write-ddl.js';
import { outboxTableDdlV1 } from './outbox-table-ddl.js';
import { tableNames } from '../table-names.js';

/*
 * The DDL of every released version, as Postgres receives it: a released version never changes
 * (migrations that ran it must keep meaning what they meant). A new version is a new file and a new
 * section below; a diff in an existing section is a defect.
 */

const RELEASED: readonly DrainFunctionVersions[] = [
  { claim: 'v3', settle: 'v2' },
  { claim: 'v4', settle: 'v3' },
  { claim: 'v4', settle: 'v4' },
  { claim: 'v5', settle: 'v4' },
];

const specs = {
  'register-outbox': defineOutbox({
    table: 'vpc.fga_register_outbox',
    partitionColumn: 'resource_id',
    channel: 'vpc_fga_register_outbox',
  }),
  'tuple-outbox': defineOutbox({ table: 'iam.fga_outbox', partitionColumn: 'tuple_key', channel: 'iam_fga_outbox' }),
};

const section = (title: string, statements: readonly string[]) => `-- ==== ${title}\n\n${statements.join(';\n\n')};\n`;

describe.each(Object.entries(specs))('the released DDL of a %s', (name, spec) => {
  test('is unchanged', async () => {
    const text = [
      section('outboxTableDdlV1', outboxTableDdlV1(spec)),
      section(
        'outboxTableDdlV1 with partitionIndex: the statement it adds',
        outboxTableDdlV1(spec, { partitionIndex: true }).filter((s) => s.includes(tableNames(spec).partitionIndex)),
      ),
      ...RELEASED.map((versions) =>
        section(
          `drainFunctionsDdl claim ${versions.claim}, settle ${versions.settle}`,
          drainFunctionsDdl(spec, versions),
        ),
      ),
      section('ledgerLifeDdlV1', ledgerLifeDdlV1(spec)),
      section('lateWriteVerificationDdl', lateWriteVerificationDdl(spec)),
      section('enqueueFunctionDdl v1', enqueueFunctionDdl(spec, 'v1')),
      section('actionsLogDdlV1', actionsLogDdlV1(spec)),
    ].join('\n');
    await expect(text).toMatchFileSnapshot(`./__snapshots__/${name}.sql`);
  });
});
