import type { OpenFgaClient } from '@openfga/sdk';
import type { TupleKey } from '@outbox/outbox';
import {
  auditOutbox,
  createReconciler,
  listRows,
  outboxStatus,
  partitionTimeline,
  repairOutbox,
  rowsTouchingTuple,
  type ListedRow,
  type Logger,
  type RedrivenIntent,
} from '@outbox/reconciler';
import { createOpenFgaTupleReader } from '@outbox/openfga';
import { lastHour, lastHourChart } from './chart.js';
import {
  csrfField,
  dataTable,
  notice,
  outboxForm,
  pickOutbox,
  reasonAndConfirm,
  tupleId,
  tupleText,
  when,
  type Page,
  type PageContext,
} from './context.js';
import { check, tuplesBehind, tuplesOn, type ConsoleOpenFga } from './fga.js';
import { html, type SafeHtml } from './html.js';
import type { ConsoleOutbox } from './options.js';

type Query = Record<string, string | undefined>;

/** The page shows what the reconciler decided: its log lines would say it twice. */
export const quietLogger: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

const unknownOutbox = (name: string | undefined): Page => ({
  title: 'No such outbox',
  body: notice(`No outbox named "${name ?? ''}" is configured.`, true),
  status: 404,
});

const noOpenFga = (what: string): SafeHtml =>
  notice(`${what} needs OpenFGA, and the console was given no openfga connection.`, true);

const age = (seconds: number | null): string => {
  if (seconds === null) return '-';
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
};

/** Page 1: every outbox's counts, oldest pending age, last delivery and last hour. */
export async function outboxesPage(ctx: PageContext): Promise<Page> {
  const rows: SafeHtml[] = [];
  for (const o of ctx.outboxes) {
    const s = await outboxStatus({ name: o.name, spec: o.spec, db: o.db, database: o.database ?? '' });
    const chart = lastHourChart(o.name, await lastHour(o.db, o.spec));
    const q = `?outbox=${encodeURIComponent(o.name)}`;
    rows.push(
      html`<tr data-outbox="${o.name}">
        <th scope="row">${o.name}<br /><span class="muted">${o.spec.table}</span></th>
        <td class="n" data-col="pending">${s.pending}</td>
        <td class="n" data-col="deliverable">${s.deliverable}</td>
        <td class="n" data-col="backingOff">${s.backingOff}</td>
        <td class="n" data-col="poisoned"><a href="${ctx.base}/poisoned${q}">${s.poisoned}</a></td>
        <td class="n" data-col="exhausted">${s.poisonedByCause.exhausted}</td>
        <td class="n" data-col="refused">${s.poisonedByCause.refused}</td>
        <td class="n" data-col="superseded">${s.superseded}</td>
        <td class="n" data-col="retired">${s.retired}</td>
        <td class="n" data-col="discarded">${s.discarded}</td>
        <td data-col="oldest">${age(s.oldestPendingAgeSeconds)}</td>
        <td data-col="lastDelivery">${when(s.lastDeliveryAt)}</td>
        <td>${chart}</td>
      </tr>`,
    );
  }
  return {
    title: 'Outboxes',
    body: dataTable(
      "Every outbox's ledger now (poisoned includes superseded; closed: retired and discarded)",
      [
        'Outbox',
        'Pending',
        'Deliverable',
        'Backing off',
        'Poisoned',
        'exhausted',
        'refused',
        'Superseded',
        'Retired',
        'Discarded',
        'Oldest pending',
        'Last delivery',
        'Last hour (enqueued, delivered)',
      ],
      rows,
    ),
  };
}

const stateCell = (row: ListedRow): SafeHtml =>
  row.state === 'superseded'
    ? html`<span class="warn">superseded</span>`
    : row.state === 'poisoned' || row.state === 'discarded'
      ? html`<span class="bad">${row.state}</span>`
      : row.state === 'delivered'
        ? html`<span class="good">delivered</span>`
        : html`${row.state}`;

/** A link to a partition's timeline. */
const partitionLink = (ctx: PageContext, o: ConsoleOutbox, key: string): SafeHtml =>
  html`<a href="${ctx.base}/timeline?outbox=${encodeURIComponent(o.name)}&amp;partition=${encodeURIComponent(key)}"
    >${key}</a
  >`;

function poisonedTable(
  ctx: PageContext,
  o: ConsoleOutbox,
  rows: readonly ListedRow[],
  caption: string,
  select: boolean,
) {
  if (rows.length === 0) return html`<p>${caption}: none.</p>`;
  const body = rows.map(
    (r) =>
      html`<tr data-id="${r.id}">
        ${select ? html`<td><input type="checkbox" name="id" value="${r.id}" id="pick-${r.id}" aria-label="Select row ${r.id}" /></td>` : ''}
        <th scope="row">${r.id}</th>
        <td>${partitionLink(ctx, o, r.partitionKey)}</td>
        <td>${stateCell(r)}</td>
        <td>${r.poisonCause ?? 'exhausted'}</td>
        <td>${r.poisonCode ?? '-'}</td>
        <td class="n">${r.attempts}</td>
        <td data-col="lastError"><pre>${r.lastError ?? ''}</pre></td>
        <td>${when(r.createdAt)}</td>
      </tr>`,
  );
  return dataTable(
    caption,
    [
      ...(select ? ['Select'] : []),
      'Id',
      'Partition',
      'State',
      'Cause',
      'OpenFGA code',
      'Attempts',
      'Last error',
      'Created',
    ],
    body,
  );
}

/** Page 2: the poisoned rows of one outbox, superseded ones apart; retire and discard forms when actions are on. */
export async function poisonedPage(ctx: PageContext, query: Query): Promise<Page> {
  const o = pickOutbox(ctx, query.outbox);
  if (!o) return unknownOutbox(query.outbox);
  const { rows, more } = await listRows(o, { state: 'poisoned', limit: 500 });
  const superseded = rows.filter((r) => r.state === 'superseded');
  const poisoned = rows.filter((r) => r.state !== 'superseded');
  const form = (action: 'retire' | 'discard', list: ListedRow[], caption: string, consequence: string) => {
    const legend = action === 'retire' ? 'Retire superseded rows' : 'Discard poisoned rows';
    const table = poisonedTable(ctx, o, list, caption, ctx.actions && list.length > 0);
    if (!ctx.actions || list.length === 0) return table;
    return html`<form method="post" action="${ctx.base}/actions/${action}">
      <fieldset>
        <legend>${legend}</legend>
        ${csrfField(ctx)}<input type="hidden" name="outbox" value="${o.name}" />
        ${table}${reasonAndConfirm(action, consequence)}
        <div><button type="submit">${action === 'retire' ? 'Retire selected' : 'Discard selected'}</button></div>
      </fieldset>
    </form>`;
  };
  return {
    title: `Poisoned rows of ${o.name}`,
    body: html`${outboxForm(ctx, '/poisoned', o)} ${more ? notice('Showing the first 500 poisoned rows.') : ''}
    ${form('retire', superseded, 'Superseded: a later intent of the partition was delivered; retire them, never revive them', 'I confirm: retire the selected rows (they stay as evidence)')}
    ${form('discard', poisoned, 'Poisoned, not superseded: redrive them, or discard them', 'I confirm: discard the selected rows; their tuples will never be written to OpenFGA')}`,
  };
}

/** The tuples a partition's delivered rows leave in OpenFGA, replayed in id order (writes add, deletes remove). */
function replayDelivered(rows: readonly { state: string; payload: unknown }[]): Map<string, TupleKey> {
  const tuples = new Map<string, TupleKey>();
  for (const row of rows) {
    if (row.state !== 'delivered') continue;
    const payload = (row.payload ?? {}) as { writes?: TupleKey[]; deletes?: TupleKey[] };
    for (const t of payload.deletes ?? []) tuples.delete(tupleId(t));
    for (const t of payload.writes ?? []) tuples.set(tupleId(t), t);
  }
  return tuples;
}

/** Page 3: every ledger row of one partition, next to the tuples OpenFGA holds on its object now. */
export async function timelinePage(ctx: PageContext, query: Query): Promise<Page> {
  const o = pickOutbox(ctx, query.outbox);
  if (!o) return unknownOutbox(query.outbox);
  const key = query.partition?.trim() ?? '';
  const pick = outboxForm(
    ctx,
    '/timeline',
    o,
    html`<div>
      <label for="partition">Partition key</label
      ><input type="text" id="partition" name="partition" value="${key}" required />
    </div>`,
  );
  if (key === '')
    return {
      title: 'Partition timeline',
      body: html`${pick}
        <p>Give a partition key (e.g. an object, <code>vpc:…</code>).</p>`,
    };
  const { rows, more } = await partitionTimeline(o, key, 500);
  const ledger = rows.map(
    (r) =>
      html`<tr data-id="${r.id}">
        <th scope="row">${r.id}</th>
        <td>${stateCell(r)}</td>
        <td class="n">${r.attempts}</td>
        <td>${when(r.createdAt)}</td>
        <td>${when(r.sentAt)}</td>
        <td>${when(r.retiredAt)}${r.retiredReason ? html`<br />${r.retiredReason}` : ''}</td>
        <td><pre>${JSON.stringify(r.payload, null, 1)}</pre></td>
        <td data-col="lastError"><pre>${r.lastError ?? ''}</pre></td>
      </tr>`,
  );
  let openfga: SafeHtml = noOpenFga('The tuples next to the ledger');
  if (ctx.fga) {
    const object = o.owner?.partitionFilter(key).object ?? key;
    const live = await tuplesOn(ctx.fga, object);
    // Only the tuples on this object: a row of the partition may write others (the audit reads those).
    const expected = new Map([...replayDelivered(rows)].filter(([, t]) => t.object === object));
    const liveIds = new Set(live.map(tupleId));
    const lines = [
      ...live.map((t) => ({
        t,
        verdict: expected.has(tupleId(t)) ? 'agrees' : 'unexpected: no delivered row wrote it',
      })),
      ...[...expected.values()]
        .filter((t) => !liveIds.has(tupleId(t)))
        .map((t) => ({ t, verdict: 'missing: a delivered row wrote it' })),
    ];
    const agreed = lines.every((l) => l.verdict === 'agrees');
    openfga = html`<h2>OpenFGA now, on ${object}</h2>
      <p data-agreement="${agreed ? 'agrees' : 'drift'}">
        ${agreed ? html`<span class="good">Agreement</span>: the delivered rows, replayed in order, leave exactly the tuples OpenFGA holds.` : html`<span class="bad">Disagreement</span>: see the rows marked below.`}
      </p>
      ${dataTable(
        html`Tuples on ${object}: OpenFGA's, against the delivered rows replayed`,
        ['Tuple', 'Verdict'],
        html`${lines.map(
          (l) =>
            html`<tr>
              <td><code>${tupleText(l.t)}</code></td>
              <td class="${l.verdict === 'agrees' ? 'good' : 'bad'}">${l.verdict}</td>
            </tr>`,
        )}`,
      )}`;
  }
  return {
    title: `Partition ${key} of ${o.name}`,
    body: html`${pick}
      <h2>The ledger, in order</h2>
      ${more ? notice('Showing the first 500 rows.') : ''}
      ${
        rows.length === 0
          ? html`<p>No row of ${o.spec.table} has this partition key.</p>`
          : dataTable(
              html`Every row of ${key}, oldest first`,
              ['Id', 'Outcome', 'Attempts', 'Created', 'Delivered', 'Closed', 'Payload', 'Last error'],
              ledger,
            )
      }
      ${openfga}`,
  };
}

const intentList = (
  ctx: PageContext,
  o: ConsoleOutbox,
  caption: string,
  intents: readonly RedrivenIntent[],
  kind: string,
) =>
  intents.length === 0
    ? html`<p data-kind="${kind}">${caption}: none.</p>`
    : dataTable(
        caption,
        ['Id', 'Partition', 'Cause', 'Last error'],
        html`${intents.map(
          (i) =>
            html`<tr data-id="${i.id}">
              <th scope="row">${i.id}</th>
              <td>${partitionLink(ctx, o, i.partitionKey)}</td>
              <td>${i.poisonCause ?? 'exhausted'}${i.poisonCode ? html` (${i.poisonCode})` : ''}</td>
              <td><pre>${i.lastError ?? ''}</pre></td>
            </tr>`,
        )}`,
        html` data-kind="${kind}"`,
      );

/** Page 4: what a redrive would revive and what it would refuse, from one snapshot (the reconciler's dry run). */
export async function redrivePage(ctx: PageContext, query: Query): Promise<Page> {
  const o = pickOutbox(ctx, query.outbox);
  if (!o) return unknownOutbox(query.outbox);
  const reconciler = createReconciler({ db: o.db, spec: o.spec, logger: quietLogger });
  const preview = await reconciler.redrivePoisoned({ dryRun: true });
  const action = ctx.actions
    ? html`<form method="post" action="${ctx.base}/actions/redrive">
        <fieldset>
          <legend>Redrive ${o.name}</legend>
          ${csrfField(ctx)}<input type="hidden" name="outbox" value="${o.name}" />
          ${reasonAndConfirm('redrive', 'I confirm: revive the rows a pass revives now (never a superseded one)')}
          <div><button type="submit">Redrive now</button></div>
        </fieldset>
      </form>`
    : '';
  return {
    title: `Redrive preview of ${o.name}`,
    body: html`${outboxForm(ctx, '/redrive', o)}
      <p>A dry run: nothing was changed or locked.${preview.more ? ' More rows remain beyond this batch.' : ''}</p>
      ${intentList(ctx, o, 'Would revive', preview.revived, 'revived')}
      ${intentList(ctx, o, 'Would refuse as superseded (a later intent was delivered; retire these)', preview.superseded, 'superseded')}
      ${intentList(ctx, o, 'Deferred (a drainer holds the partition)', preview.deferred, 'deferred')}
      ${intentList(ctx, o, 'Waiting (refused by OpenFGA: retried only when asked, after a fix)', preview.waiting ?? [], 'waiting')}
      ${action}`,
  };
}

/** The OpenFGA reader the audit and repair use. */
export const readerOf = (openfga: ConsoleOpenFga) =>
  createOpenFgaTupleReader({
    apiUrl: openfga.apiUrl.replace(/\/+$/, ''),
    storeId: openfga.storeId,
    ...(openfga.credentials ? { credentials: openfga.credentials } : {}),
  });

/** Page 5: an audit run on demand (a button), by class, and the repair it would make against the budget. */
export async function driftPage(ctx: PageContext, query: Query, openfga: ConsoleOpenFga | undefined): Promise<Page> {
  const o = pickOutbox(ctx, query.outbox);
  if (!o) return unknownOutbox(query.outbox);
  const pick = outboxForm(ctx, '/drift', o, html`<input type="hidden" name="run" value="1" />`, 'Run audit now');
  const title = `Drift of ${o.name}`;
  if (!openfga) return { title, body: html`${pick}${noOpenFga('The audit')}` };
  if (!o.owner)
    return {
      title,
      body: html`${pick}${notice(`The audit of ${o.name} needs its owner mapping, and the console was given none.`, true)}`,
    };
  if (query.run !== '1')
    return {
      title,
      body: html`${pick}
        <p>
          No audit is stored: the console runs one when asked (it reads every tuple of the outbox's object types). Press
          "Run audit now".
        </p>`,
    };
  const reader = readerOf(openfga);
  const audit = await auditOutbox({ db: o.db, spec: o.spec, owner: o.owner, reader, sampleSize: 50 });
  const plan = await repairOutbox({
    db: o.db,
    spec: o.spec,
    owner: o.owner,
    reader,
    dryRun: true,
    maxDeletes: ctx.maxDeletes,
    sampleSize: 50,
  });
  const kind = (name: string, count: number, sample: readonly { key: string; tuples: readonly TupleKey[] }[]) =>
    html`<tr data-class="${name}">
      <th scope="row">${name}</th>
      <td class="n">${count}</td>
      <td>${sample.flatMap((s) => s.tuples.map((t) => html`<code>${tupleText(t)}</code><br />`))}</td>
    </tr>`;
  const change = (kind: string) => (t: TupleKey) =>
    html`<tr>
      <td>${kind}</td>
      <td><code>${tupleText(t)}</code></td>
    </tr>`;
  const corrections = plan.sample.flatMap((c) => [
    ...c.writes.map(change('write')),
    ...c.deletes.map(change('delete')),
  ]);
  const repair =
    ctx.actions && plan.partitions > 0
      ? html`<form method="post" action="${ctx.base}/actions/repair">
          <fieldset>
            <legend>Repair ${o.name}</legend>
            ${csrfField(ctx)}<input type="hidden" name="outbox" value="${o.name}" />
            ${reasonAndConfirm('repair', 'I confirm: enqueue these corrections into the outbox (the drainers deliver them)')}
            <div><button type="submit" ${plan.withinBudget ? '' : html` disabled`}>Repair now</button></div>
          </fieldset>
        </form>`
      : '';
  return {
    title,
    body: html`${pick}
      <p>
        Audited <time datetime="${audit.startedAt.toISOString()}">${audit.startedAt.toISOString()}</time>:
        ${audit.partitionsCompared} partition(s) compared, ${audit.skippedPending} skipped as pending;
        <strong data-drifted="${audit.drifted}"
          >${audit.drifted === 0 ? 'OpenFGA agrees with the owner' : `drift in ${audit.drifted} partition(s)`}</strong
        >.
      </p>
      ${dataTable(
        'Drift by class',
        ['Class', 'Tuples', 'Sample'],
        html`${kind(
          'missing',
          audit.missing.tuples,
          audit.missing.sample.map((s) => ({ key: s.partitionKey, tuples: s.tuples })),
        )}
        ${kind(
          'unexpected',
          audit.unexpected.tuples,
          audit.unexpected.sample.map((s) => ({ key: s.partitionKey, tuples: s.tuples })),
        )}
        ${kind(
          'orphans',
          audit.orphans.tuples,
          audit.orphans.sample.map((s) => ({ key: s.object, tuples: s.tuples })),
        )}`,
      )}
      <h2>The repair it would make</h2>
      <p data-budget="${plan.withinBudget ? 'within' : 'over'}">
        ${plan.intents} intent(s) in ${plan.partitions} partition(s): ${plan.writes} write(s), ${plan.deletes}
        delete(s);
        ${plan.withinBudget ? html`<span class="good">within the budget</span>` : html`<span class="bad">over the budget</span>`}
        of ${plan.maxDeletes} delete(s).
      </p>
      ${
        corrections.length > 0
          ? dataTable('Corrections (a dry run: nothing enqueued)', ['Change', 'Tuple'], corrections)
          : ''
      }
      ${repair}`,
  };
}

/** Page 6: why user U may (or may not) do R on object O: Check, the tuples behind it, and the ledger rows that wrote each. */
export async function provenancePage(ctx: PageContext, query: Query): Promise<Page> {
  const user = query.user?.trim() ?? '';
  const relation = query.relation?.trim() ?? '';
  const object = query.object?.trim() ?? '';
  const field = (id: string, label: string, value: string, hint: string) =>
    html`<div>
      <label for="${id}">${label}</label
      ><input type="text" id="${id}" name="${id}" value="${value}" placeholder="${hint}" required />
    </div>`;
  const form = html`<form class="inline" method="get" action="${ctx.base}/provenance">
    ${field('user', 'User', user, 'user:alice')}${field('relation', 'Relation', relation, 'can_view')}${field('object', 'Object', object, 'vpc:…')}<button
      type="submit"
    >
      Ask OpenFGA
    </button>
  </form>`;
  const title = 'Provenance';
  if (!ctx.fga) return { title, body: html`${form}${noOpenFga('Provenance')}` };
  if (!user || !relation || !object)
    return {
      title,
      body: html`${form}
        <p>Why may user U do R on object O? Give all three.</p>`,
    };
  const fga: OpenFgaClient = ctx.fga;
  let allowed: boolean;
  let behind: Awaited<ReturnType<typeof tuplesBehind>>;
  try {
    allowed = await check(fga, user, relation, object);
    behind = await tuplesBehind(fga, relation, object);
  } catch (error) {
    return {
      title,
      body: html`${form}${notice(`OpenFGA refused the question: ${(error as Error).message}`, true)}`,
      status: 400,
    };
  }
  const rows: SafeHtml[] = [];
  for (const { tuple, under } of behind.tuples) {
    const writers: SafeHtml[] = [];
    for (const o of ctx.outboxes) {
      for (const r of await rowsTouchingTuple(o, tuple, 10))
        writers.push(
          html`<li>
            ${o.name}
            <a
              href="${ctx.base}/timeline?outbox=${encodeURIComponent(o.name)}&amp;partition=${encodeURIComponent(r.partitionKey)}"
              >#${r.id}</a
            >
            ${r.wrote ? 'writes' : 'deletes'} it: ${stateCell(r)} ${when(r.sentAt ?? r.createdAt)}
          </li>`,
        );
    }
    const direct = tuple.user === user;
    rows.push(
      html`<tr data-tuple="${tupleText(tuple)}">
        <td><code>${tupleText(tuple)}</code></td>
        <td><code>${under}</code></td>
        <td>${direct ? html`<strong>names ${user}</strong>` : 'a step'}</td>
        <td>
          ${
            writers.length > 0
              ? html`<ul>
                  ${writers}
                </ul>`
              : html`<span class="bad">no ledger row wrote it (written out of band)</span>`
          }
        </td>
      </tr>`,
    );
  }
  return {
    title,
    body: html`${form}
      <p data-allowed="${allowed}">
        OpenFGA's Check: <strong class="${allowed ? 'good' : 'bad'}">${allowed ? 'allowed' : 'not allowed'}</strong> —
        ${user} ${relation} ${object}.
      </p>
      ${dataTable(html`The tuples behind ${relation} on ${object} (Expand, followed through usersets${behind.complete ? '' : '; cut short'}), and the ledger rows that wrote each`, ['Tuple', 'Found under', 'User', 'Ledger rows'], rows)}`,
  };
}
