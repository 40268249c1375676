import type { OpenFgaClient } from '@openfga/sdk';
import type { TupleKey } from '@outbox/outbox';
import { html, type SafeHtml } from './html.js';
import type { ConsoleOutbox } from './options.js';

/** What a page is rendered with. */
export interface PageContext {
  /** The plugin's prefix ('' at the root): every link starts with it. */
  readonly base: string;
  readonly outboxes: readonly ConsoleOutbox[];
  readonly fga: OpenFgaClient | undefined;
  /** Whether action forms are shown (enabled; each is still authorized when posted). */
  readonly actions: boolean;
  readonly maxDeletes: number;
  /** The CSRF token the page's forms carry. */
  readonly csrf: string;
}

/** A rendered page: its title, body and status. */
export interface Page {
  readonly title: string;
  readonly body: SafeHtml;
  readonly status?: number;
}

export const tupleText = (t: TupleKey): string => `${t.user} ${t.relation} ${t.object}`;
export const tupleId = (t: TupleKey): string => `${t.user}\u0000${t.relation}\u0000${t.object}`;

/** An ISO timestamp as a <time>, or a dash. */
export const when = (iso: string | null | undefined): SafeHtml =>
  iso
    ? html`<time datetime="${iso}">${iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}</time>`
    : html`<span class="muted">-</span>`;

/** A notice: information, or a problem (`role="alert"`). */
export const notice = (text: SafeHtml | string, bad = false): SafeHtml =>
  bad ? html`<p class="notice bad" role="alert">${text}</p>` : html`<p class="notice">${text}</p>`;

/** The outbox a page is about: the `outbox` query parameter, else the first. */
export function pickOutbox(ctx: PageContext, name: string | undefined): ConsoleOutbox | undefined {
  if (name === undefined || name === '') return ctx.outboxes[0];
  return ctx.outboxes.find((o) => o.name === name);
}

/** A GET form choosing the outbox (and `extra` fields), labelled, submitted with a button. */
export function outboxForm(
  ctx: PageContext,
  path: string,
  current: ConsoleOutbox | undefined,
  extra: SafeHtml | string = '',
  button = 'Show',
): SafeHtml {
  const options = ctx.outboxes.map(
    (o) => html`<option value="${o.name}" ${o === current ? html` selected` : ''}>${o.name} (${o.spec.table})</option>`,
  );
  return html`<form class="inline" method="get" action="${ctx.base}${path}">
    <div>
      <label for="outbox">Outbox</label
      ><select id="outbox" name="outbox">
        ${options}
      </select>
    </div>
    ${extra}<button type="submit">${button}</button>
  </form>`;
}

/** The hidden CSRF field every POST form carries. */
export const csrfField = (ctx: PageContext): SafeHtml => html`<input type="hidden" name="csrf" value="${ctx.csrf}" />`;

/**
 * The reason and confirmation every action asks for: a required reason and a required checkbox
 * saying what will happen (the server refuses the action without either).
 */
export function reasonAndConfirm(id: string, consequence: string): SafeHtml {
  return html`<div>
      <label for="${id}-reason">Reason (kept in the actions log)</label
      ><textarea id="${id}-reason" name="reason" required rows="2"></textarea>
    </div>
    <div>
      <label><input type="checkbox" name="confirm" value="yes" required /> ${consequence}</label>
    </div>`;
}

/** A table with its caption and column headers; `attributes` (e.g. `data-kind`) go on the table. */
export const dataTable = (
  caption: SafeHtml | string,
  headers: readonly string[],
  rows: SafeHtml | readonly SafeHtml[],
  attributes: SafeHtml | string = '',
): SafeHtml =>
  html`<table${attributes}><caption>${caption}</caption><thead><tr>${headers.map((h) => html`<th scope="col">${h}</th>`)}</tr></thead><tbody>${rows}</tbody></table>`;
