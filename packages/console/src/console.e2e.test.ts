import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { readOutboxActions } from '@outbox/outbox';
import { showRow } from '@outbox/reconciler';
import { openFgaClientConfig, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { outboxConsole } from './index.js';
import { launchChromium, tabThrough, unlabelledControls } from './testing/browser.js';
import { SCRIPT, incidentOwner, scriptedIncident, type Incident } from './testing/incident.js';

// The console in a bare fastify app, on the real stack after a scripted incident, clicked through in
// a real browser (Debian's chromium): every page's values, its labels and keyboard path, each action
// refused without permission and done with it, and text from the ledger or OpenFGA shown as text.
// CONSOLE_SCREENSHOTS=docs/console writes each page as a PNG (docs/console.md shows them).
const t = useTestDatabase();
const fga = useOpenFgaStore();
const shots = process.env.CONSOLE_SCREENSHOTS ? resolve(process.env.CONSOLE_SCREENSHOTS) : undefined;
let incident: Incident;
let app: FastifyInstance;
let url: string;
let browser: Browser;
let admin: BrowserContext;
let stranger: BrowserContext;
let alerts = 0;

beforeAll(async () => {
  [incident, browser] = await Promise.all([scriptedIncident(t.db, fga), launchChromium()]);
  app = Fastify();
  const outboxes = [{ name: 'vpc', spec: incident.spec, db: t.db, owner: incidentOwner(), database: 'test' }];
  const openfga = { ...openFgaClientConfig(fga.storeId, fga.authorizationModelId), storeId: fga.storeId };
  await app.register(outboxConsole, { prefix: '/console', outboxes, openfga, actions: { enabled: true } });
  await app.register(outboxConsole, { prefix: '/ro', outboxes, openfga });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
  // Who asks is the x-user-id header (the default `actor`): opal is the platform's outbox admin, mallory is not.
  admin = await browser.newContext({
    extraHTTPHeaders: { 'x-user-id': 'opal' },
    viewport: { width: 1400, height: 900 },
  });
  stranger = await browser.newContext({ extraHTTPHeaders: { 'x-user-id': 'mallory' } });
  for (const context of [admin, stranger])
    context.on('page', (p) => p.on('dialog', (d) => void ((alerts += 1), d.dismiss())));
  if (shots) mkdirSync(shots, { recursive: true });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await app?.close();
});

async function open(context: BrowserContext, path: string): Promise<Page> {
  const page = await context.newPage();
  const response = await page.goto(`${url}${path}`);
  expect(response?.status(), path).toBe(200);
  return page;
}

/** Every page: labelled controls, every control reached by Tab (the skip link first), no script run. */
async function accessible(page: Page, shot?: string) {
  expect(await unlabelledControls(page)).toEqual([]);
  const tab = await tabThrough(page);
  expect(tab.first).toBe('Skip to content');
  expect(tab.reached).toBe(tab.focusable);
  expect(await page.locator('script').count()).toBe(0);
  if (shots && shot) await page.screenshot({ path: `${shots}/${shot}.png`, fullPage: true });
}

const cell = (page: Page, col: string) => page.locator(`tr[data-outbox="vpc"] td[data-col="${col}"]`).innerText();

describe('the console, after the incident', () => {
  test('outboxes: the counts, ages and the last hour', async () => {
    const page = await open(admin, '/console/');
    const counts = Object.fromEntries(
      await Promise.all(
        [
          'pending',
          'deliverable',
          'backingOff',
          'poisoned',
          'exhausted',
          'refused',
          'superseded',
          'retired',
          'discarded',
        ].map(async (c) => [c, await cell(page, c)]),
      ),
    );
    expect(counts).toEqual({
      pending: '3',
      deliverable: '0',
      backingOff: '0',
      poisoned: '3',
      exhausted: '2',
      refused: '1',
      superseded: '1',
      retired: '0',
      discarded: '0',
    });
    expect(await cell(page, 'lastDelivery')).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/);
    expect(await page.locator('svg[role=img]').getAttribute('aria-label')).toMatch(
      /enqueued (0, ){11}6 \(total 6\); delivered (0, ){11}3 \(total 3\)/,
    );
    await accessible(page, 'outboxes');
  });

  test('poisoned rows: cause, code, error, attempts, superseded or not; the error with <script> is text', async () => {
    const page = await open(admin, '/console/poisoned?outbox=vpc');
    const row = (id: string) => page.locator(`tr[data-id="${id}"]`);
    expect(await row(incident.superseded).innerText()).toMatch(
      /vpc:old\s+superseded\s+exhausted\s+-\s+1\s+OpenFGA unreachable: connect ECONNREFUSED/,
    );
    expect(await row(incident.poisoned).innerText()).toMatch(
      /vpc:db\s+poisoned\s+exhausted\s+-\s+1\s+OpenFGA unreachable/,
    );
    expect(await row(incident.refused).innerText()).toMatch(/vpc:x\s+poisoned\s+refused\s+validation_error\s+1/);
    expect(await row(incident.refused).locator('td[data-col="lastError"]').innerText()).toContain(
      `relation 'vpc#owner${SCRIPT}' not found`,
    );
    await accessible(page, 'poisoned');
  });

  test("timeline: a partition's rows in order next to OpenFGA's tuples, the out-of-band one marked", async () => {
    const page = await open(admin, '/console/poisoned?outbox=vpc');
    await page.getByRole('link', { name: 'vpc:old' }).click();
    expect(page.url()).toContain('/console/timeline?outbox=vpc&partition=vpc%3Aold');
    expect(
      await page.locator('tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id'))),
    ).toEqual([incident.superseded, incident.supersededBy]);
    expect(await page.locator('[data-agreement]').getAttribute('data-agreement')).toBe('agrees');
    await page.getByLabel('Partition key').fill('vpc:web');
    await page.getByRole('button', { name: 'Show' }).click();
    expect(await page.locator(`tr[data-id="${incident.delivered}"]`).innerText()).toMatch(/delivered/);
    expect(await page.locator('[data-agreement]').getAttribute('data-agreement')).toBe('drift');
    const verdicts = await page.locator('table').nth(1).locator('tbody tr').allInnerTexts();
    expect(verdicts.map((v) => v.replace(/\s+/g, ' ').trim()).sort()).toEqual([
      'project:p1 project vpc:web agrees',
      'user:alice owner vpc:web agrees',
      'user:mallory owner vpc:web unexpected: no delivered row wrote it',
    ]);
    await accessible(page, 'timeline');
    // The payload with <script> in an object is shown as text too.
    await page.getByLabel('Partition key').fill('vpc:x');
    await page.getByRole('button', { name: 'Show' }).click();
    expect(await page.locator('main').innerText()).toContain(`"object": "vpc:${SCRIPT.replaceAll('"', '\\"')}"`);
    expect(await page.locator('script').count()).toBe(0);
  });

  test('redrive preview: what it would revive, what it refuses as superseded; nothing changes', async () => {
    const page = await open(admin, '/console/');
    await page.getByRole('link', { name: 'Redrive preview' }).click();
    expect(
      await page
        .locator('table[data-kind="revived"] tr[data-id]')
        .evaluateAll((r) => r.map((x) => x.getAttribute('data-id'))),
    ).toEqual([incident.poisoned]);
    expect(
      await page
        .locator('table[data-kind="superseded"] tr[data-id]')
        .evaluateAll((r) => r.map((x) => x.getAttribute('data-id'))),
    ).toEqual([incident.superseded]);
    expect(
      await page
        .locator('table[data-kind="waiting"] tr[data-id]')
        .evaluateAll((r) => r.map((x) => x.getAttribute('data-id'))),
    ).toEqual([incident.refused]);
    expect((await showRow({ spec: incident.spec, db: t.db }, incident.poisoned))?.state).toBe('poisoned');
    await accessible(page, 'redrive');
  });

  test('drift: an audit on demand by class, and the repair it would make within the budget', async () => {
    const page = await open(admin, '/console/drift?outbox=vpc');
    await page.getByRole('button', { name: 'Run audit now' }).click();
    const count = (c: string) => page.locator(`tr[data-class="${c}"] td.n`).innerText();
    expect([await count('missing'), await count('unexpected'), await count('orphans')]).toEqual(['0', '1', '1']);
    expect(await page.locator('tr[data-class="unexpected"]').innerText()).toContain('user:mallory owner vpc:web');
    expect(await page.locator('[data-budget]').getAttribute('data-budget')).toBe('within');
    await accessible(page, 'drift');
  });

  test('provenance: Check, the tuples behind it, and the ledger row that wrote each (or none)', async () => {
    const page = await open(admin, '/console/provenance');
    await page.getByLabel('User').fill('user:alice');
    await page.getByLabel('Relation').fill('can_view');
    await page.getByLabel('Object').fill('vpc:web');
    await page.getByRole('button', { name: 'Ask OpenFGA' }).click();
    expect(await page.locator('[data-allowed]').getAttribute('data-allowed')).toBe('true');
    expect(await page.locator('tr[data-tuple="user:alice owner vpc:web"]').innerText()).toContain(
      `#${incident.delivered} writes it: delivered`,
    );
    expect(await page.locator('tr[data-tuple="user:mallory owner vpc:web"]').innerText()).toContain(
      'no ledger row wrote it (written out of band)',
    );
    await accessible(page, 'provenance');
    await page.goto(`${url}/console/provenance?user=user:sam&relation=can_view&object=vpc:web`);
    expect(await page.locator('[data-allowed]').getAttribute('data-allowed')).toBe('false');
  });
});

describe('actions', () => {
  test('read-only by default: no forms, and no route that changes anything', async () => {
    const page = await open(admin, '/ro/poisoned?outbox=vpc');
    expect(await page.locator('form[method=post]').count()).toBe(0);
    expect(await page.locator('[data-mode]').innerText()).toBe('read-only');
    expect((await fetch(`${url}/ro/actions/redrive`, { method: 'POST' })).status).toBe(404);
  });

  test('a POST without the CSRF token, or from another site, is refused', async () => {
    const body = new URLSearchParams({ outbox: 'vpc', reason: 'x', confirm: 'yes', csrf: 'A'.repeat(43) });
    const plain = await fetch(`${url}/console/actions/redrive`, {
      method: 'POST',
      body,
      headers: { 'x-user-id': 'opal' },
    });
    expect(plain.status).toBe(403);
    expect(await plain.text()).toContain('CSRF check failed');
    const cookie = `outbox_console_csrf=${'A'.repeat(43)}`;
    const cross = await fetch(`${url}/console/actions/redrive`, {
      method: 'POST',
      body,
      headers: { cookie, 'x-user-id': 'opal', 'sec-fetch-site': 'cross-site' },
    });
    expect(cross.status).toBe(403);
    expect(await readOutboxActions(t.db, incident.spec)).toEqual([]);
  });

  async function act(context: BrowserContext, path: string, submit: string, reason: string, pick: string[] = []) {
    const page = await open(context, path);
    for (const id of pick) await page.getByLabel(`Select row ${id}`).check();
    const form = page.locator('form[method=post]', { has: page.getByRole('button', { name: submit }) });
    await form.getByLabel('Reason (kept in the actions log)').fill(reason);
    await form.getByRole('checkbox', { name: /I confirm/ }).check();
    const [response] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === 'POST'),
      form.getByRole('button', { name: submit }).click(),
    ]);
    return { page, status: response.status(), text: await page.locator('main').innerText() };
  }

  test('each action is refused without permission, done with it, and written to the actions log', async () => {
    const poisoned = '/console/poisoned?outbox=vpc';
    const refusals = [
      await act(stranger, poisoned, 'Retire selected', 'vpc:old deregistered', [incident.superseded]),
      await act(stranger, poisoned, 'Discard selected', 'a bad relation', [incident.refused]),
      await act(stranger, '/console/redrive?outbox=vpc', 'Redrive now', 'outage over'),
      await act(stranger, '/console/drift?outbox=vpc&run=1', 'Repair now', 'out of band tuple'),
    ];
    for (const r of refusals) {
      expect(r.status).toBe(403);
      expect(r.text).toMatch(/mallory may not (retire|discard|redrive|repair) on vpc; nothing was changed/);
    }
    expect(await readOutboxActions(t.db, incident.spec)).toEqual([]);

    const retired = await act(admin, poisoned, 'Retire selected', 'vpc:old deregistered during the outage', [
      incident.superseded,
    ]);
    expect([retired.status, retired.text]).toEqual([200, expect.stringContaining('vpc: retired 1 row(s)')]);
    await accessible(retired.page, 'action-done');
    const discarded = await act(admin, poisoned, 'Discard selected', `the relation ${SCRIPT} is a typo`, [
      incident.refused,
    ]);
    expect([discarded.status, discarded.text]).toEqual([200, expect.stringContaining('vpc: discarded 1 row(s)')]);
    expect(discarded.text).toContain(SCRIPT);
    const redriven = await act(admin, '/console/redrive?outbox=vpc', 'Redrive now', 'OpenFGA is back');
    expect([redriven.status, redriven.text]).toEqual([200, expect.stringContaining('vpc: revived 1 row(s)')]);
    const repaired = await act(
      admin,
      '/console/drift?outbox=vpc&run=1',
      'Repair now',
      'mallory was granted out of band',
    );
    expect([repaired.status, repaired.text]).toEqual([200, expect.stringContaining('2 delete(s)')]);
    expect(alerts).toBe(0);

    const log = await readOutboxActions(t.db, incident.spec);
    expect(log.map((a) => [a.actor, a.action, a.reason, a.counts])).toEqual([
      ['opal', 'repair', 'mallory was granted out of band', expect.objectContaining({})],
      ['opal', 'redrive', 'OpenFGA is back', { requested: 0, revived: 1 }],
      ['opal', 'discard', `the relation ${SCRIPT} is a typo`, expect.objectContaining({})],
      ['opal', 'retire', 'vpc:old deregistered during the outage', expect.objectContaining({})],
    ]);
    expect(log[3]?.ids).toEqual([incident.superseded]);
    expect(log[2]?.ids).toEqual([incident.refused]);
    expect((await showRow({ spec: incident.spec, db: t.db }, incident.superseded))?.state).toBe('retired');
    expect((await showRow({ spec: incident.spec, db: t.db }, incident.poisoned))?.state).toBe('deliverable');
  });

  test('an action without a reason or without the confirmation changes nothing', async () => {
    const page = await open(admin, '/console/redrive?outbox=vpc');
    const csrf = await page.locator('input[name=csrf]').first().inputValue();
    const cookies = (await admin.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    for (const [fields, message] of [
      [{ reason: '', confirm: 'yes' }, 'give a reason'],
      [{ reason: 'x' }, 'tick the confirmation box'],
    ] as const) {
      const res = await fetch(`${url}/console/actions/redrive`, {
        method: 'POST',
        body: new URLSearchParams({ outbox: 'vpc', csrf, ...fields }),
        headers: { cookie: cookies, 'x-user-id': 'opal' },
      });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain(message);
    }
  });
});
