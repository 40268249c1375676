import {
  createReconciler,
  DiscardRefusedError,
  MAX_RETIRE_IDS,
  RetireRefusedError,
  type RedrivenIntent,
} from '@outbox/reconciler';
import type { OutboxActionTrace } from '@outbox/outbox';
import type { Command } from 'commander';
import { actionTraces, addActorOption, type ActorOptions } from './actor-option.js';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith } from './command-line.js';
import { confirm } from './confirm.js';
import { docsUrl } from './docs-url.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { explainError } from './explain-error.js';
import { idsArgument } from './id-argument.js';
import { intentOutput, type IntentOutput } from './output-schemas.js';
import { rowsById } from '@outbox/reconciler';
import { silentLogger } from './silent-logger.js';
import { onlyOutbox, type Target } from './targets.js';

interface CloseOptions extends TargetOptions, ActorOptions {
  readonly json?: boolean;
  readonly reason: string;
  readonly yes?: boolean;
}

/** What tells `retire` and `discard` apart; the rest (ids, reason, asking, all or nothing) is one command. */
interface CloseMode {
  readonly verb: 'retire' | 'discard';
  readonly closedAs: 'retired' | 'discarded';
  readonly summary: string;
  readonly description: string;
  /** Appended to the question and to the line saying what was closed. */
  readonly consequence: string;
  /** Closes `ids`, recording the change in the actions log with `record`, in the same transaction. */
  readonly close: (
    target: Target,
    ids: readonly string[],
    reason: string,
    record: OutboxActionTrace | undefined,
  ) => Promise<readonly RedrivenIntent[]>;
  readonly refused: (error: unknown) => readonly { id: string; refusal: string }[] | undefined;
}

const reconciler = (target: Target) => createReconciler({ db: target.db, spec: target.spec, logger: silentLogger });

const RETIRE: CloseMode = {
  verb: 'retire',
  closedAs: 'retired',
  summary: 'close superseded intents with a reason',
  description:
    `Retires superseded intents (design §6: ${docsUrl('design.md#6-reconciler-the-redrive-rule')}): all or nothing — if any id is not superseded, nothing changes and each ` +
    "such id is named. The rows stay as evidence, and the retire is recorded in the outbox's actions log (`outbox actions`). " +
    'Asks for confirmation on a terminal; without one, --yes is required.',
  consequence: '',
  close: (target, ids, reason, record) => reconciler(target).retire(ids, reason, { record }),
  refused: (error) => (error instanceof RetireRefusedError ? error.refused : undefined),
};

const DISCARD: CloseMode = {
  verb: 'discard',
  closedAs: 'discarded',
  summary: 'close poisoned intents that are not superseded: their tuples are never written',
  description:
    `Discards poisoned intents no delivered successor covers (design §10: ${docsUrl('design.md#10-the-ledgers-life')}): the decision that their tuples will never ` +
    'be written to OpenFGA, an under-grant. All or nothing — a superseded id (retire it), a deliverable or delivered one, or one ' +
    'whose partition a drainer holds right now refuses the call, naming each. The rows stay as evidence, and the discard is ' +
    "recorded in the outbox's actions log (`outbox actions`). Asks for confirmation on a terminal; without one, --yes is required.",
  consequence: ': their tuples will never be written to OpenFGA',
  close: (target, ids, reason, record) => reconciler(target).discardPoisoned({ ids, reason, record }),
  refused: (error) => (error instanceof DiscardRefusedError ? error.refused : undefined),
};

function defineClose(command: Command, ctx: CommandContext, mode: CloseMode): Command {
  const { verb, closedAs } = mode;
  addActorOption(addTargetOptions(command, ctx, { outboxes: 'one' }))
    .summary(mode.summary)
    .description(mode.description)
    .argument('<ids...>', `row ids (at most ${MAX_RETIRE_IDS})`, idsArgument)
    .requiredOption('--reason <text>', 'why: kept in retired_reason as evidence')
    .option('--yes', `${verb} without asking (required without a terminal)`)
    .action(
      exitWith(ctx.box, async (ids: string[], options: CloseOptions): Promise<ExitCode> => {
        if (options.reason.trim() === '')
          throw new CliError('--reason is empty', 'say why: it is kept as evidence', EXIT.usage);
        if (ids.length > MAX_RETIRE_IDS)
          throw new CliError(
            `at most ${MAX_RETIRE_IDS} ids per ${verb}, got ${ids.length}`,
            'split the list',
            EXIT.usage,
          );
        // Before anything is asked or changed: the change is recorded with who made it (docs/cli.md).
        const record = actionTraces(options, ctx.io, verb, { reason: options.reason.trim() });
        if (!options.yes && !ctx.io.stdin.isTTY)
          throw new CliError(
            `${verb} changes rows and asks first, but there is no terminal to ask on`,
            'pass --yes',
            EXIT.usage,
          );
        return onTargets(
          options,
          ctx,
          async ([target]) => {
            if (!target) throw new Error('no outbox selected');
            const reason = options.reason.trim();
            const closed: IntentOutput[] = [];
            const refused: { id: string; refusal: string }[] = [];
            // RetireOutput or DiscardOutput: the closed rows under the key `retired` or `discarded`.
            const output = () => ({
              outbox: target.name,
              table: target.spec.table,
              reason,
              [closedAs]: closed,
              refused,
            });
            if (!options.yes) {
              for (const row of await rowsById(target, ids))
                ctx.io.stderr.write(`  #${row.id} ${row.partitionKey} ${row.state}\n`);
              const question = `${verb[0]?.toUpperCase()}${verb.slice(1)} ${ids.length} intent(s) of ${target.spec.table} with reason "${reason}"${mode.consequence}?`;
              if (!(await confirm(ctx.io, question))) {
                ctx.io.stderr.write(`${ctx.name}: nothing ${closedAs}\n`);
                return EXIT.problem;
              }
            }
            try {
              closed.push(...(await mode.close(target, ids, reason, record(target.spec))).map(intentOutput));
            } catch (error) {
              const refusals = mode.refused(error);
              if (!refusals) throw error;
              refused.push(...refusals);
              if (options.json) printJson(ctx.io, output());
              ctx.io.stderr.write(`${explainError(error).line(ctx.name)}\n`);
              return EXIT.problem;
            }
            if (options.json) printJson(ctx.io, output());
            else
              ctx.io.stdout.write(
                `${target.name}: ${closedAs} ${closed.map((r) => `#${r.id}`).join(', ')} ("${reason}")${mode.consequence}\n`,
              );
            return EXIT.ok;
          },
          (config) => onlyOutbox(config, options.outbox, verb),
        );
      }),
    );
  return command;
}

/** `outbox retire IDS… --reason TEXT`: closes superseded intents, all or nothing. */
export const defineRetire = (command: Command, ctx: CommandContext): Command => defineClose(command, ctx, RETIRE);

/** `outbox discard IDS… --reason TEXT`: closes poisoned intents that are not superseded, all or nothing; their tuples are never written. */
export const defineDiscard = (command: Command, ctx: CommandContext): Command => defineClose(command, ctx, DISCARD);
