import type { Command } from 'commander';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith } from './command-line.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { idArgument } from './id-argument.js';
import type { ShowOutput } from './output-schemas.js';
import { showRow } from '@outbox/reconciler';
import { onlyOutbox } from './targets.js';

interface ShowOptions extends TargetOptions {
  readonly json?: boolean;
}

/** The state line: the state, and for a poisoned row why, for a superseded one what to do. */
function stateText(row: ShowOutput): string {
  if (row.supersededBy) return `${row.state} by #${row.supersededBy} (delivered): retire it, never revive it`;
  if (row.state === 'poisoned')
    return `poisoned (${row.poisonCause ?? 'exhausted'}${row.poisonCode ? `: ${row.poisonCode}` : ''})`;
  if (row.state === 'discarded') return 'discarded: its tuples were never written';
  return row.state;
}

/** The row as `field: value` lines, its payload pretty-printed below. */
function showText(row: ShowOutput): string {
  const lines: [string, string | number | boolean | null][] = [
    ['outbox', row.outbox === row.table ? row.table : `${row.outbox} (${row.table})`],
    ['id', row.id],
    ['partition', row.partitionKey],
    ['state', stateText(row)],
    ['attempts', `${row.attempts} of ${row.maxAttempts}`],
    ['created', row.createdAt],
    ['next attempt', row.nextAttemptAt],
    ['delivered', row.sentAt],
    ['closed', row.retiredAt === null ? null : `${row.retiredAt}: ${row.retiredReason ?? ''}`],
    ['head', row.isHead],
    ['last error', row.lastError],
  ];
  const width = Math.max(...lines.map(([label]) => label.length));
  return `${lines.map(([label, value]) => `${label.padEnd(width)}  ${value === null ? '-' : String(value)}`).join('\n')}\npayload\n${JSON.stringify(row.payload, null, 2)}\n`;
}

/** `outbox show ID`: one row in full. */
export function defineShow(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx, { outboxes: 'one' })
    .summary('one row in full')
    .description(
      'Shows one outbox row in full: its state, payload and, for a superseded row, the delivered successor that supersedes it.',
    )
    .argument('<id>', 'the row id', idArgument)
    .action(
      exitWith(ctx.box, async (id: string, options: ShowOptions): Promise<ExitCode> => {
        return onTargets(
          options,
          ctx,
          async ([target]) => {
            if (!target) throw new Error('no outbox selected');
            const row = await showRow(target, id);
            if (!row)
              throw new CliError(
                `${target.spec.table} has no row ${id}`,
                `see \`${ctx.name} list --outbox ${target.name}\``,
                EXIT.problem,
              );
            const output: ShowOutput = { outbox: target.name, table: target.spec.table, ...row };
            if (options.json) printJson(ctx.io, output);
            else ctx.io.stdout.write(showText(output));
            return EXIT.ok;
          },
          (config) => onlyOutbox(config, options.outbox, 'show'),
        );
      }),
    );
  return command;
}
