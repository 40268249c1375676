// `pnpm capacity --services N --intents-per-second R [--retention-days D]`: projects a platform onto
// the measured ceilings of docs/capacity.md (read from its tables: the page is where they are kept).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** A row of docs/capacity.md's tables: `id` → its figure. */
export type Ceilings = ReadonlyMap<string, number>;

export const CAPACITY_DOC = fileURLToPath(new URL('../docs/capacity.md', import.meta.url));

/** The figures of every `| \`id\` | … | figure | unit | … |` row of `markdown`. */
export function readCeilings(markdown: string): Ceilings {
  const ceilings = new Map<string, number>();
  for (const line of markdown.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const id = /^`([a-z-]+)`$/.exec(cells[1] ?? '')?.[1];
    const figure = Number(cells[3]);
    if (id && Number.isFinite(figure) && cells[3] !== '') ceilings.set(id, figure);
  }
  return ceilings;
}

export interface Platform {
  readonly services: number;
  readonly intentsPerSecond: number;
  readonly retentionDays: number;
}

/** One part's need at the platform's peak, and over how many machines it can spread. */
export interface Need {
  readonly part: string;
  readonly cores: number;
  /** What it spreads over: one shared datastore, or one database (or drainer) per service. */
  readonly over: { readonly count: number; readonly what: string };
  readonly note: string;
}

export interface Projection {
  /** Per part, the most cores on one machine first: that part saturates first. */
  readonly needs: readonly Need[];
  readonly walMbPerSecond: number;
  readonly diskTb: number;
  readonly hotPartitionLimit: number;
}

function figure(ceilings: Ceilings, id: string): number {
  const value = ceilings.get(id);
  if (value === undefined || value <= 0) throw new Error(`docs/capacity.md has no positive figure for \`${id}\``);
  return value;
}

/** What `platform` needs of each ceiling at its peak. */
export function project(platform: Platform, ceilings: Ceilings): Projection {
  const rate = platform.intentsPerSecond;
  const perService = rate / platform.services;
  const needs: Need[] = [
    {
      part: 'OpenFGA Writes (replicas and their datastore)',
      cores: rate / figure(ceilings, 'fga-write'),
      over: { count: 1, what: 'datastore' },
      note: 'Writes all go through the one datastore: past it, a larger one or a store per group of services',
    },
    {
      part: 'outbox databases: one-intent commits',
      cores: rate / figure(ceilings, 'enqueue'),
      over: { count: platform.services, what: 'service databases' },
      note: `${fixed(perService)} intents/s a service; in one shared database instead, all of it on one machine (batching 100 intents a transaction: ${fixed(rate / figure(ceilings, 'enqueue-batched'))} cores)`,
    },
    {
      part: 'drainers',
      cores: rate / figure(ceilings, 'drain'),
      over: { count: platform.services, what: 'services' },
      note: `at least one replica per service (${platform.services}); ${fixed(figure(ceilings, 'replica-rss'))} MB a replica`,
    },
  ].sort((a, b) => b.cores / b.over.count - a.cores / a.over.count);
  const walBytes = rate * (figure(ceilings, 'wal-enqueue') + figure(ceilings, 'wal-deliver'));
  const diskBytes = rate * 86_400 * platform.retentionDays * figure(ceilings, 'row');
  return {
    needs,
    walMbPerSecond: walBytes / 1e6,
    diskTb: diskBytes / 1e12,
    hotPartitionLimit: figure(ceilings, 'partition'),
  };
}

const fixed = (n: number) =>
  n >= 10 ? Math.round(n).toLocaleString('en-US') : n >= 0.1 ? n.toFixed(1) : n.toPrecision(2);

/** The projection as markdown. */
export function render(platform: Platform, projection: Projection): string {
  return [
    `${platform.services} services, ${platform.intentsPerSecond.toLocaleString('en-US')} intents/s at peak, ${platform.retentionDays} days kept:`,
    '',
    '| part | cores at peak | spread over | cores on one machine | |',
    '| --- | --- | --- | --- | --- |',
    ...projection.needs.map(
      (n) =>
        `| ${n.part} | ${fixed(n.cores)} | ${n.over.count.toLocaleString('en-US')} ${n.over.what} | ${fixed(n.cores / n.over.count)} | ${n.note} |`,
    ),
    '',
    `Saturates first: ${projection.needs[0]?.part}.`,
    `WAL: ${fixed(projection.walMbPerSecond)} MB/s; outbox rows kept: ${fixed(projection.diskTb)} TB; one partition stays under ${projection.hotPartitionLimit} intents/s whatever is added.`,
  ].join('\n');
}

function positive(name: string, raw: string | undefined, fallback?: number): number {
  const value = raw === undefined ? fallback : Number(raw);
  if (value === undefined || !Number.isFinite(value) || value <= 0)
    throw new Error(`--${name}: expected a positive number, got ${raw ?? 'nothing'}`);
  return value;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    const { values } = parseArgs({
      options: {
        services: { type: 'string' },
        'intents-per-second': { type: 'string' },
        'retention-days': { type: 'string' },
      },
    });
    const platform = {
      services: positive('services', values.services),
      intentsPerSecond: positive('intents-per-second', values['intents-per-second']),
      retentionDays: positive('retention-days', values['retention-days'], 30),
    };
    console.log(render(platform, project(platform, readCeilings(readFileSync(CAPACITY_DOC, 'utf8')))));
  } catch (error) {
    console.error(`capacity: ${error instanceof Error ? error.message : String(error)}`);
    console.error('usage: pnpm capacity --services N --intents-per-second R [--retention-days D]');
    process.exitCode = 2;
  }
}
