import { Option, type Command } from 'commander';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { formatRelative } from './durations.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { idArgument } from './id-argument.js';
import type { ListOutput, ListedRow } from './output-schemas.js';
import { STATE_FILTERS, listRows, type StateFilter } from '@outbox/reconciler';
import { cut, textTable } from './text-table.js';

interface ListOptions extends TargetOptions {
  readonly json?: boolean;
  readonly state?: StateFilter;
  readonly key?: string;
  readonly fromId?: string;
  readonly toId?: string;
  readonly limit: number;
}

/** How much of `last_error` the table shows (--json has it whole). */
const ERROR_WIDTH = 60;

function rowCells(outbox: string, row: ListedRow, now: Date): string[] {
  const next =
    row.state === 'deliverable' || row.state === 'backing-off' ? formatRelative(new Date(row.nextAttemptAt), now) : '-';
  return [
    outbox,
    row.id,
    row.partitionKey,
    row.state,
    String(row.attempts),
    next,
    row.lastError === null ? '' : cut(row.lastError, ERROR_WIDTH),
  ];
}

/** `outbox list`: rows by state, key or id range. */
export function defineList(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('rows by state, partition key or id range')
    .description('Lists outbox rows in id order, with their attempts, next attempt and last error.')
    .addOption(
      new Option(
        '--state <state>',
        'only rows in this state (poisoned includes superseded; deliverable includes backing-off)',
      ).choices(STATE_FILTERS),
    )
    .option('--key <partition-key>', 'only rows of this partition (e.g. vpc:<id>)')
    .option('--from-id <id>', 'only rows with this id or larger', idArgument)
    .option('--to-id <id>', 'only rows with this id or smaller', idArgument)
    .option('--limit <n>', 'rows per outbox', integerArgument(1, 10_000), 50)
    .action(
      exitWith(ctx.box, async (options: ListOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets) => {
          const output: ListOutput = { outboxes: [] };
          for (const target of targets) {
            const { rows, more } = await listRows(target, { ...options, partitionKey: options.key });
            output.outboxes.push({ name: target.name, table: target.spec.table, rows, more });
          }
          if (options.json) {
            printJson(ctx.io, output);
            return EXIT.ok;
          }
          const now = new Date();
          const cells = output.outboxes.flatMap((o) => o.rows.map((row) => rowCells(o.name, row, now)));
          const headers = ['outbox', 'id', 'key', 'state', 'attempts', 'next-attempt', 'last-error'];
          ctx.io.stdout.write(
            cells.length === 0
              ? 'no rows match\n'
              : textTable(
                  headers.map((header) => ({
                    header,
                    align: header === 'id' || header === 'attempts' ? 'right' : 'left',
                  })),
                  cells,
                ),
          );
          for (const o of output.outboxes.filter((x) => x.more)) {
            ctx.io.stdout.write(
              `${o.name}: more rows match than --limit ${options.limit} (narrow with --from-id, or raise --limit)\n`,
            );
          }
          return EXIT.ok;
        });
      }),
    );
  return command;
}
