/** Markup that is already escaped: only {@link html} and {@link raw} make one. */
export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text as HTML: every character that could open markup or end an attribute is escaped. */
export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c] as string);

/** A value in a template: markup as is, a list joined, null and undefined as nothing, anything else escaped text. */
function part(value: unknown): string {
  if (value instanceof SafeHtml) return value.text;
  if (Array.isArray(value)) return value.map(part).join('');
  if (value === null || value === undefined) return '';
  return escapeHtml(String(value));
}

/**
 * The one way pages are written: every interpolated value is escaped unless it is itself {@link html}, so
 * a payload or an error text carrying `<script>` is shown as text (the console's tests check it).
 * @example html`<td>${row.lastError}</td>`
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let text = strings[0] ?? '';
  for (const [i, value] of values.entries()) text += part(value) + (strings[i + 1] ?? '');
  return new SafeHtml(text);
}

/** Markup written by the console itself (an SVG path), never text from the ledger or OpenFGA. */
export const raw = (text: string): SafeHtml => new SafeHtml(text);
