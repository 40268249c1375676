import { readOutboxActions } from '@outbox/outbox';
import type { Command } from 'commander';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { ActionOutput, ActionsOutput } from './output-schemas.js';
import { cut, textTable } from './text-table.js';

interface ActionsOptions extends TargetOptions {
  readonly json?: boolean;
  readonly limit: number;
}

/** How many ids a line of the table names (--json has them all). */
const NAMED = 5;
const REASON_WIDTH = 40;

/** What an action changed, in a cell: its counts, then its first ids. */
function changedText(a: ActionOutput): string {
  const counts = Object.entries(a.counts).map(([name, n]) => `${name} ${n}`);
  const ids = a.ids.slice(0, NAMED).map((id) => `#${id}`);
  if (a.ids.length > NAMED) ids.push(`+${a.ids.length - NAMED}`);
  return [counts.join(', '), ids.join(' ')].filter(Boolean).join(': ');
}

/** `outbox actions`: the actions log, newest first. */
export function defineActions(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('what operators changed: the actions log, newest first')
    .description(
      `Lists each outbox's actions log (${docsUrl('ledger.md#the-actions-log')}), newest first: every redrive, retire, discard, ` +
        'repair --apply and compact that changed the ledger, with when, who (--actor, or the OS user), the ids and counts it ' +
        'changed and the reason. Read-only.',
    )
    .option('--limit <n>', 'actions per outbox', integerArgument(1, 10_000), 50)
    .action(
      exitWith(ctx.box, async (options: ActionsOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets) => {
          const output: ActionsOutput = { outboxes: [] };
          for (const target of targets) {
            // One more than asked: whether older actions are left out.
            const entries = await readOutboxActions(target.db, target.spec, { limit: options.limit + 1 });
            output.outboxes.push({
              name: target.name,
              table: target.spec.table,
              actions: entries.slice(0, options.limit).map((e) => ({
                id: e.id,
                at: e.at.toISOString(),
                actor: e.actor,
                action: e.action,
                ids: [...e.ids],
                counts: { ...e.counts },
                reason: e.reason,
              })),
              more: entries.length > options.limit,
            });
          }
          if (options.json) {
            printJson(ctx.io, output);
            return EXIT.ok;
          }
          // One table for every outbox, newest first (ISO times sort as text).
          const rows = output.outboxes
            .flatMap((o) => o.actions.map((a) => ({ outbox: o.name, a })))
            .sort((x, y) => (x.a.at < y.a.at ? 1 : x.a.at > y.a.at ? -1 : 0));
          const cells = rows.map(({ outbox, a }) => [
            a.at.replace('T', ' ').replace(/\.\d+Z$/, 'Z'),
            outbox,
            a.actor,
            a.action,
            changedText(a),
            a.reason === null ? '' : cut(a.reason, REASON_WIDTH),
          ]);
          ctx.io.stdout.write(
            cells.length === 0
              ? 'no actions recorded\n'
              : textTable(
                  ['at', 'outbox', 'actor', 'action', 'changed', 'reason'].map((header) => ({ header })),
                  cells,
                ),
          );
          for (const o of output.outboxes.filter((x) => x.more))
            ctx.io.stdout.write(`${o.name}: older actions than these ${options.limit} (raise --limit)\n`);
          return EXIT.ok;
        });
      }),
    );
  return command;
}
