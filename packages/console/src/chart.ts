import type { AnyKysely, OutboxSpec } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import { sql } from 'kysely';
import { html, raw, type SafeHtml } from './html.js';

/** Minutes per bar of the last-hour chart. */
const BUCKET_MINUTES = 5;
const BUCKETS = 60 / BUCKET_MINUTES;

/** Rows enqueued and delivered in each 5-minute slice of the last hour, oldest first. */
export interface LastHour {
  readonly enqueued: number[];
  readonly delivered: number[];
}

export async function lastHour(db: AnyKysely, spec: OutboxSpec): Promise<LastHour> {
  const table = sql.raw(tableNames(spec).table);
  // Bucket 0 is the newest five minutes. Reads the last hour's rows only (created_at, sent_at).
  const bucket = (column: string) =>
    sql`floor(extract(epoch from (now() - ${sql.ref(column)})) / ${BUCKET_MINUTES * 60})::int`;
  const result = await sql<{ kind: 'enqueued' | 'delivered'; bucket: number; n: string }>`
    select 'enqueued' as kind, ${bucket('created_at')} as bucket, count(*)::text as n from ${table}
      where created_at > now() - interval '1 hour' group by 2
    union all
    select 'delivered', ${bucket('sent_at')}, count(*)::text from ${table}
      where sent_at > now() - interval '1 hour' group by 2`.execute(db);
  const out: LastHour = { enqueued: Array(BUCKETS).fill(0), delivered: Array(BUCKETS).fill(0) };
  for (const row of result.rows) {
    const i = BUCKETS - 1 - Math.min(BUCKETS - 1, Math.max(0, Number(row.bucket)));
    out[row.kind][i] = Number(row.n);
  }
  return out;
}

/** Two bars per slice (enqueued, delivered), drawn by the server: an image with its numbers in its label. */
export function lastHourChart(name: string, hour: LastHour): SafeHtml {
  const width = 240;
  const height = 48;
  const max = Math.max(1, ...hour.enqueued, ...hour.delivered);
  const slot = width / BUCKETS;
  const bars = hour.enqueued.flatMap((made, i) => {
    const sent = hour.delivered[i] ?? 0;
    const bar = (n: number, x: number, cls: string) => {
      const h = Math.round((n / max) * (height - 12));
      return `<rect class="${cls}" x="${x.toFixed(1)}" y="${height - 10 - h}" width="${(slot / 2 - 1).toFixed(1)}" height="${h}"></rect>`;
    };
    return [bar(made, i * slot, 'made'), bar(sent, i * slot + slot / 2, 'sent')];
  });
  const total = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const label = `${name}, last hour in 5-minute slices: enqueued ${hour.enqueued.join(', ')} (total ${total(hour.enqueued)}); delivered ${hour.delivered.join(', ')} (total ${total(hour.delivered)})`;
  return html`<svg
    role="img"
    aria-label="${label}"
    width="${width}"
    height="${height}"
    viewBox="0 0 ${width} ${height}"
  >
    <title>${label}</title>
    ${raw(bars.join(''))}
    <text x="0" y="${height - 1}">-60 min</text>
    <text x="${width - 24}" y="${height - 1}">now</text>
  </svg>`;
}
