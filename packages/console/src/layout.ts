import { html, type SafeHtml } from './html.js';

/** The pages, in the navigation's order. */
export const PAGES = [
  { path: '/', title: 'Outboxes' },
  { path: '/poisoned', title: 'Poisoned rows' },
  { path: '/timeline', title: 'Partition timeline' },
  { path: '/redrive', title: 'Redrive preview' },
  { path: '/drift', title: 'Drift' },
  { path: '/provenance', title: 'Provenance' },
] as const;

export type PagePath = (typeof PAGES)[number]['path'];

/** A whole page: a skip link, the navigation (the current page marked), one h1 and the body. */
export function layout(
  base: string,
  current: PagePath | undefined,
  title: string,
  mode: string,
  body: SafeHtml,
): SafeHtml {
  const nav = PAGES.map(
    (p) =>
      html`<li><a href="${base}${p.path}" ${current === p.path ? html` aria-current="page"` : ''}>${p.title}</a></li>`,
  );
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · outbox console</title>
        <link rel="stylesheet" href="${base}/assets/console.css" />
      </head>
      <body>
        <a class="skip" href="#main">Skip to content</a>
        <header>
          <strong>outbox console</strong>
          <nav aria-label="Pages">
            <ul>
              ${nav}
            </ul>
          </nav>
          <span class="muted" data-mode>${mode}</span>
        </header>
        <main id="main" tabindex="-1">
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html> `;
}
