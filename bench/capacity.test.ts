import { readFileSync } from 'node:fs';
import { expect, test } from 'vitest';
import { CAPACITY_DOC, project, readCeilings, render } from './capacity.js';

const doc = readFileSync(CAPACITY_DOC, 'utf8');

test("docs/capacity.md's tables give every figure the projection reads", () => {
  expect([...readCeilings(doc).keys()].sort()).toEqual([
    'drain',
    'enqueue',
    'enqueue-batched',
    'fga-write',
    'partition',
    'pgbouncer',
    'replica-rss',
    'row',
    'wal-deliver',
    'wal-enqueue',
  ]);
  expect(() => project({ services: 1, intentsPerSecond: 1, retentionDays: 1 }, new Map())).toThrow(/`fga-write`/);
});

test("the page's example projection is what the script prints", () => {
  const platform = { services: 1000, intentsPerSecond: 100_000, retentionDays: 30 };
  const projection = project(platform, readCeilings(doc));
  expect(projection.needs.map((n) => [n.part.split(' ')[0], Math.round(n.cores * 10) / 10])).toEqual([
    ['OpenFGA', 76.9],
    ['outbox', 100],
    ['drainers', 4.5],
  ]);
  expect(Math.round(projection.walMbPerSecond)).toBe(87);
  expect(Math.round(projection.diskTb)).toBe(104);
  const printed = render(platform, projection);
  expect(printed).toContain('Saturates first: OpenFGA Writes');
  for (const figure of [
    '77 cores of OpenFGA Writes',
    '100 cores of one-intent commits',
    '4.5 cores of drainers',
    '87 MB/s',
    '104 TB',
  ])
    expect(doc.replace(/\s+/g, ' ')).toContain(figure);
});
