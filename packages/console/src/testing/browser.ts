// Debian's chromium driven by playwright-core: nothing here downloads a browser. Test-only.
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

/** The chromium binary: $CHROMIUM_PATH, else Debian's (scripts/bootstrap.sh installs it). */
export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/lib/chromium/chromium', '/usr/bin/chromium'];
  const found = candidates.find((path) => path && existsSync(path));
  if (!found) throw new Error('no chromium: run scripts/bootstrap.sh (apt-get install chromium), or set CHROMIUM_PATH');
  return found;
}

export const launchChromium = (): Promise<Browser> =>
  // --no-sandbox: the tests run as root in CI containers, where chromium's sandbox refuses to start.
  chromium.launch({ executablePath: chromiumPath(), args: ['--no-sandbox', '--disable-gpu'] });

// The page's side runs in the browser; written as source text, for the repository typechecks without the DOM library.
const UNLABELLED = `[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter((el) => !el.getAttribute('aria-label') && (el.tagName === 'BUTTON' ? el.textContent.trim() === '' : el.labels.length === 0))
  .map((el) => el.outerHTML.slice(0, 120))`;
const MARK_FOCUSABLE = `(() => {
  const all = [...document.querySelectorAll('a[href], button:not([disabled]), input:not([type=hidden]), select, textarea')];
  all.forEach((el, i) => el.setAttribute('data-tab', String(i)));
  document.activeElement?.blur();
  return all.length;
})()`;
const FOCUSED = `[document.activeElement?.getAttribute('data-tab') ?? '', document.activeElement?.textContent?.trim() ?? '']`;

/** The form controls of the page that have no label (by <label>, aria-label or a button's text). */
export const unlabelledControls = (page: Page): Promise<string[]> => page.evaluate<string[]>(UNLABELLED);

/**
 * Tabs from the top of the page through every focusable element and returns how many were
 * reached and how many there are: a page is keyboard-navigable when the two agree.
 */
export async function tabThrough(page: Page): Promise<{ reached: number; focusable: number; first: string }> {
  const focusable = await page.evaluate<number>(MARK_FOCUSABLE);
  const seen = new Set<string>();
  let first = '';
  for (let i = 0; i < focusable + 1; i += 1) {
    await page.keyboard.press('Tab');
    const [tab, text] = await page.evaluate<[string, string]>(FOCUSED);
    if (i === 0) first = text;
    if (tab) seen.add(tab);
  }
  return { reached: seen.size, focusable, first };
}
