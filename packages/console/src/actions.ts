import { OutboxConfigError, traceOutboxAction } from '@outbox/outbox';
import {
  createReconciler,
  DiscardRefusedError,
  MAX_RETIRE_IDS,
  repairOutbox,
  RepairBudgetError,
  RetireRefusedError,
  type RedrivenIntent,
} from '@outbox/reconciler';
import { sql } from 'kysely';
import { notice, type Page, type PageContext } from './context.js';
import type { ConsoleOpenFga } from './fga.js';
import { html } from './html.js';
import type { ConsoleAction, ConsoleOutbox } from './options.js';
import { quietLogger, readerOf } from './pages.js';

const ID = /^[1-9][0-9]{0,18}$/;

const refusedPage = (status: number, title: string, text: string): Page => ({
  title,
  body: notice(text, true),
  status,
});

const done = (
  ctx: PageContext,
  o: ConsoleOutbox,
  title: string,
  text: string,
  intents: readonly RedrivenIntent[] = [],
) => ({
  title,
  body: html`<p class="notice" role="status" data-done>${text}</p>
    ${
      intents.length > 0
        ? html`<ul>
            ${intents.map((i) => html`<li>#${i.id} ${i.partitionKey}</li>`)}
          </ul>`
        : ''
    }
    <p>
      <a href="${ctx.base}/poisoned?outbox=${encodeURIComponent(o.name)}">Back to the poisoned rows of ${o.name}</a> ·
      <a href="${ctx.base}/">Outboxes</a>
    </p>`,
});

/**
 * Does one authorized action with the reason and confirmation the form gave, recording it in the
 * outbox's actions log in the transaction that makes the change (the reconciler's `record`), as the
 * CLI's commands do. What the reconciler refuses (all or nothing) is a 409 naming each id.
 */
export async function runAction(
  ctx: PageContext,
  action: ConsoleAction,
  o: ConsoleOutbox,
  form: URLSearchParams,
  actor: string,
  openfga: ConsoleOpenFga | undefined,
): Promise<Page> {
  const reason = (form.get('reason') ?? '').trim();
  if (reason === '')
    return refusedPage(400, 'A reason is needed', `${action}: give a reason; it is kept in the actions log.`);
  if (form.get('confirm') !== 'yes')
    return refusedPage(400, 'Not confirmed', `${action}: tick the confirmation box; nothing was changed.`);
  let record;
  try {
    record = traceOutboxAction(o.spec, { actor, action, reason });
  } catch (error) {
    if (error instanceof OutboxConfigError) return refusedPage(400, 'Not done', `${action}: ${error.message}`);
    throw error;
  }
  const reconciler = createReconciler({ db: o.db, spec: o.spec, logger: quietLogger });
  if (action === 'retire' || action === 'discard') {
    const ids = form.getAll('id');
    if (ids.length === 0 || ids.length > MAX_RETIRE_IDS || !ids.every((id) => ID.test(id)))
      return refusedPage(400, 'No rows selected', `${action}: select between 1 and ${MAX_RETIRE_IDS} rows.`);
    try {
      const closed =
        action === 'retire'
          ? await reconciler.retire(ids, reason, { record })
          : await reconciler.discardPoisoned({ ids, reason, record });
      return done(
        ctx,
        o,
        action === 'retire' ? 'Retired' : 'Discarded',
        `${o.name}: ${action === 'retire' ? 'retired' : 'discarded'} ${closed.length} row(s) ("${reason}").`,
        closed,
      );
    } catch (error) {
      if (error instanceof RetireRefusedError || error instanceof DiscardRefusedError)
        return refusedPage(
          409,
          'Refused, nothing changed',
          `${error.message}: ${error.refused.map((r) => `#${r.id} ${r.refusal}`).join('; ')}`,
        );
      throw error;
    }
  }
  if (action === 'redrive') {
    const result = await reconciler.redrivePoisoned({ record });
    // A revival is an UPDATE, and no NOTIFY fires: wake the listening drainers (as `outbox redrive` does).
    if (result.revived.length > 0) await sql`select pg_notify(${o.spec.channel}, '')`.execute(o.db);
    return done(
      ctx,
      o,
      'Redriven',
      `${o.name}: revived ${result.revived.length} row(s); ${result.superseded.length} superseded left for retire.`,
      result.revived,
    );
  }
  if (!openfga || !o.owner)
    return refusedPage(400, 'Not done', `repair of ${o.name} needs OpenFGA and its owner mapping.`);
  try {
    const result = await repairOutbox({
      db: o.db,
      spec: o.spec,
      owner: o.owner,
      reader: readerOf(openfga),
      dryRun: false,
      maxDeletes: ctx.maxDeletes,
      record,
    });
    return done(
      ctx,
      o,
      'Repaired',
      `${o.name}: enqueued ${result.intents} correcting intent(s): ${result.writes} write(s), ${result.deletes} delete(s); the drainers deliver them.`,
    );
  } catch (error) {
    if (error instanceof RepairBudgetError) return refusedPage(409, 'Over the budget, nothing enqueued', error.message);
    throw error;
  }
}
