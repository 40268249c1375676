import { createReconciler, MAX_RETIRE_IDS, RetireRefusedError } from '@outbox/reconciler';
import type { Command } from 'commander';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith } from './command-line.js';
import { confirm } from './confirm.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { explainError } from './explain-error.js';
import { idsArgument } from './id-argument.js';
import type { RetireOutput } from './output-schemas.js';
import { rowsById } from './rows-query.js';
import { onlyOutbox } from './targets.js';

interface RetireOptions extends TargetOptions {
  readonly json?: boolean;
  readonly reason: string;
  readonly yes?: boolean;
}

/** `outbox retire IDS… --reason TEXT`: closes superseded intents, all or nothing. */
export function defineRetire(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('close superseded intents with a reason')
    .description(
      'Retires superseded intents (docs/design.md §6): all or nothing — if any id is not superseded, nothing changes and each ' +
        'such id is named. The rows stay as evidence. Asks for confirmation on a terminal; without one, --yes is required.',
    )
    .argument('<ids...>', `row ids (at most ${MAX_RETIRE_IDS})`, idsArgument)
    .requiredOption('--reason <text>', 'why: kept in retired_reason as evidence')
    .option('--yes', 'retire without asking (required without a terminal)')
    .action(
      exitWith(ctx.box, async (ids: string[], options: RetireOptions): Promise<ExitCode> => {
        if (options.reason.trim() === '') throw new CliError('--reason is empty', 'say why: it is kept as evidence', EXIT.usage);
        if (ids.length > MAX_RETIRE_IDS) throw new CliError(`at most ${MAX_RETIRE_IDS} ids per retire, got ${ids.length}`, 'split the list', EXIT.usage);
        if (!options.yes && !ctx.io.stdin.isTTY) throw new CliError('retire changes rows and asks first, but there is no terminal to ask on', 'pass --yes', EXIT.usage);
        return onTargets(options, ctx, async ([target]) => {
          if (!target) throw new Error('no outbox selected');
          const output: RetireOutput = { outbox: target.name, table: target.spec.table, reason: options.reason.trim(), retired: [], refused: [] };
          if (!options.yes) {
            const rows = await rowsById(target, ids);
            for (const row of rows) ctx.io.stderr.write(`  #${row.id} ${row.partitionKey} ${row.state}\n`);
            if (!(await confirm(ctx.io, `Retire ${ids.length} intent(s) of ${target.spec.table} with reason "${output.reason}"?`))) {
              ctx.io.stderr.write(`${ctx.name}: nothing retired\n`);
              return EXIT.problem;
            }
          }
          try {
            output.retired.push(...(await createReconciler({ db: target.db, spec: target.spec }).retire(ids, output.reason)));
          } catch (error) {
            if (!(error instanceof RetireRefusedError)) throw error;
            output.refused.push(...error.refused);
            if (options.json) printJson(ctx.io, output);
            ctx.io.stderr.write(`${explainError(error).line(ctx.name)}\n`);
            return EXIT.problem;
          }
          if (options.json) printJson(ctx.io, output);
          else ctx.io.stdout.write(`${target.name}: retired ${output.retired.map((r) => `#${r.id}`).join(', ')} ("${output.reason}")\n`);
          return EXIT.ok;
        }, (config) => onlyOutbox(config, options.outbox, 'retire'));
      }),
    );
  return command;
}
