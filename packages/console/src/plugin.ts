import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { runAction } from './actions.js';
import { CONSOLE_CSS } from './assets.js';
import { notice, pickOutbox, type Page, type PageContext } from './context.js';
import { csrfFailure, csrfToken } from './csrf.js';
import { check, openFgaClient } from './fga.js';
import { layout, type PagePath } from './layout.js';
import { DEFAULT_ADMIN, type ConsoleAction, type ConsoleAuthorize, type OutboxConsoleOptions } from './options.js';
import { driftPage, outboxesPage, poisonedPage, provenancePage, redrivePage, timelinePage } from './pages.js';

// No script runs in the pages, and nothing is loaded from elsewhere.
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

const ACTIONS: readonly ConsoleAction[] = ['redrive', 'retire', 'discard', 'repair'];

const headerActor = (request: FastifyRequest): string | undefined => {
  const value = request.headers['x-user-id'];
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
};

type Query = Record<string, string | undefined>;

/**
 * The agreement console as a fastify plugin: register it with a prefix in any fastify app.
 * Read-only unless `actions.enabled`; then each action is authorized (by default an OpenFGA Check
 * on the admin relation), asks for a reason and a confirmation, is CSRF-protected, and is recorded
 * in the outbox's actions log. docs/console.md.
 * @example
 * await app.register(outboxConsole, { prefix: '/console', outboxes: [{ name: 'vpc', spec: vpcOutbox, db }], openfga });
 */
export const outboxConsole: FastifyPluginAsync<OutboxConsoleOptions> = async (app, options) => {
  if (!options || !Array.isArray(options.outboxes) || options.outboxes.length === 0)
    throw new Error('outboxConsole: give at least one outbox ({ name, spec, db })');
  const base = app.prefix.replace(/\/+$/, '');
  const fga = options.openfga ? openFgaClient(options.openfga) : undefined;
  const actionsOn = options.actions?.enabled === true;
  const admin = options.actions?.admin ?? DEFAULT_ADMIN;
  const actorOf = options.actor ?? headerActor;
  const defaultAuthorize: ConsoleAuthorize = async ({ actor }) => {
    if (!actor || !fga) return false;
    return check(fga, actor.includes(':') ? actor : `user:${actor}`, admin.relation, admin.object);
  };
  const authorize = options.actions?.authorize ?? defaultAuthorize;
  const mode = actionsOn ? 'actions enabled (each authorized)' : 'read-only';

  const context = (request: FastifyRequest, reply: FastifyReply): PageContext => ({
    base,
    outboxes: options.outboxes,
    fga,
    actions: actionsOn,
    maxDeletes: options.actions?.maxDeletes ?? 100,
    csrf: csrfToken(request, reply, base),
  });
  const send = (reply: FastifyReply, current: PagePath | undefined, page: Page) =>
    reply
      .code(page.status ?? 200)
      .headers(SECURITY_HEADERS)
      .type('text/html; charset=utf-8')
      .send(layout(base, current, page.title, mode, page.body).text);

  app.setErrorHandler((error: Error & { statusCode?: number }, _request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
    if (status === 500) app.log.error({ err: error }, 'outbox console: a page failed');
    return send(reply, undefined, { title: 'Error', body: notice(error.message, true), status });
  });
  app.addContentTypeParser(
    'application/x-www-form-urlencoded',
    { parseAs: 'string', bodyLimit: 256 * 1024 },
    (_request, body, done) => done(null, new URLSearchParams(body as string)),
  );

  app.get('/assets/console.css', (_request, reply) =>
    reply
      .headers({ 'cache-control': 'max-age=300', 'x-content-type-options': 'nosniff' })
      .type('text/css; charset=utf-8')
      .send(CONSOLE_CSS),
  );
  const page = (path: PagePath, render: (ctx: PageContext, query: Query) => Promise<Page>) =>
    app.get(path, async (request, reply) =>
      send(reply, path, await render(context(request, reply), request.query as Query)),
    );
  page('/', (ctx) => outboxesPage(ctx));
  page('/poisoned', poisonedPage);
  page('/timeline', timelinePage);
  page('/redrive', redrivePage);
  page('/drift', (ctx, query) => driftPage(ctx, query, options.openfga));
  page('/provenance', provenancePage);

  // Read-only by default: without `actions.enabled` there is no route that changes anything.
  if (!actionsOn) return;
  for (const action of ACTIONS) {
    app.post(`/actions/${action}`, async (request, reply) => {
      const ctx = context(request, reply);
      const form = request.body instanceof URLSearchParams ? request.body : new URLSearchParams();
      const refused = (status: number, title: string, text: string) =>
        send(reply, undefined, { title, body: notice(text, true), status });
      const csrf = csrfFailure(request, form);
      if (csrf) return refused(403, 'Refused', `CSRF check failed: ${csrf}. Nothing was changed.`);
      const outbox = pickOutbox(ctx, form.get('outbox') ?? '');
      if (!outbox || !form.get('outbox')) return refused(404, 'No such outbox', 'No such outbox; nothing was changed.');
      const actor = actorOf(request);
      const allowed = await authorize({ actor, action, outbox: outbox.name, request });
      if (!allowed || !actor)
        return refused(
          403,
          'Not allowed',
          `${actor ?? 'An unidentified user'} may not ${action} on ${outbox.name}; nothing was changed.`,
        );
      return send(reply, undefined, await runAction(ctx, action, outbox, form, actor, options.openfga));
    });
  }
};
