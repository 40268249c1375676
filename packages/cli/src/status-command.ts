import type { Command } from 'commander';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { formatDuration, formatRelative } from './durations.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { StatusOutbox, StatusOutput } from './output-schemas.js';
import { outboxStatus } from './status-query.js';
import { textTable, type TextColumn } from './text-table.js';

interface StatusOptions extends TargetOptions {
  readonly json?: boolean;
  readonly check?: boolean;
  readonly watch?: number | true;
}

/** A count with the part of it an operator must look at: `3`, or `3 (2 refused)`. */
const withPart = (total: number, part: number, label: string) =>
  part > 0 ? `${total} (${part} ${label})` : String(total);

/**
 * The human table's columns, in order: one line per column, from the row the JSON prints. Within
 * 100 columns for six outboxes: `poisoned` names only its refused part (the rest exhausted) and
 * `closed` its discarded part (the rest retired), the kinds that need a human (docs/cli.md, "status").
 */
const STATUS_COLUMNS: readonly (TextColumn & { readonly cell: (s: StatusOutbox, now: Date) => string })[] = [
  { header: 'outbox', cell: (s) => s.name },
  { header: 'pending', align: 'right', cell: (s) => String(s.pending) },
  { header: 'deliverable', align: 'right', cell: (s) => String(s.deliverable) },
  { header: 'backing-off', align: 'right', cell: (s) => String(s.backingOff) },
  { header: 'poisoned', align: 'right', cell: (s) => withPart(s.poisoned, s.poisonedByCause.refused, 'refused') },
  { header: 'superseded', align: 'right', cell: (s) => String(s.superseded) },
  { header: 'closed', align: 'right', cell: (s) => withPart(s.retired + s.discarded, s.discarded, 'discarded') },
  {
    header: 'oldest',
    align: 'right',
    cell: (s) => (s.oldestPendingAgeSeconds === null ? '-' : formatDuration(s.oldestPendingAgeSeconds)),
  },
  {
    header: 'last-delivery',
    align: 'right',
    cell: (s, now) => (s.lastDeliveryAt === null ? 'never' : formatRelative(new Date(s.lastDeliveryAt), now)),
  },
];

/**
 * The status table as `outbox status` prints it.
 *
 * @example
 * process.stdout.write(statusTable(await Promise.all(targets.map(outboxStatus)), new Date()));
 */
export function statusTable(outboxes: readonly StatusOutbox[], now: Date): string {
  return textTable(
    STATUS_COLUMNS,
    outboxes.map((s) => STATUS_COLUMNS.map((c) => c.cell(s, now))),
  );
}

const DEFAULT_WATCH_SECONDS = 2;

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** `outbox status`: the backlog of each outbox by state. */
export function defineStatus(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('counts by state, oldest pending age, last delivery')
    .description(
      `Counts each outbox's rows by state (design §2: ${docsUrl('design.md#2-vocabulary')}), with the oldest pending row's age and the last delivery.`,
    )
    .option('--check', 'exit 1 when any row is poisoned (for cron and alerts)')
    .option(
      '--watch [seconds]',
      `redraw every few seconds (default ${DEFAULT_WATCH_SECONDS}) until Ctrl-C`,
      integerArgument(1, 3_600),
    )
    .action(
      exitWith(ctx.box, async (options: StatusOptions): Promise<ExitCode> => {
        if (options.watch !== undefined && (options.json || options.check)) {
          throw new CliError(
            '--watch redraws a table: it does not go with --json or --check',
            'poll `status --json` or `status --check` instead',
            EXIT.usage,
          );
        }
        return onTargets(options, ctx, async (targets) => {
          const read = async () => {
            const outboxes: StatusOutbox[] = [];
            for (const target of targets) outboxes.push(await outboxStatus(target));
            return outboxes;
          };
          if (options.watch !== undefined) {
            const seconds = options.watch === true ? DEFAULT_WATCH_SECONDS : options.watch;
            const stop = new AbortController();
            const onSignal = () => stop.abort();
            process.once('SIGINT', onSignal);
            process.once('SIGTERM', onSignal);
            try {
              while (!stop.signal.aborted) {
                const outboxes = await read();
                const now = new Date();
                if (ctx.io.stdout.isTTY) ctx.io.stdout.write('\x1b[H\x1b[2J');
                ctx.io.stdout.write(
                  `${now.toISOString()}  every ${seconds}s, Ctrl-C to stop\n${statusTable(outboxes, now)}\n`,
                );
                await pause(seconds * 1_000, stop.signal);
              }
            } finally {
              process.off('SIGINT', onSignal);
              process.off('SIGTERM', onSignal);
            }
            return EXIT.ok;
          }
          const outboxes = await read();
          const now = new Date();
          if (options.json) printJson(ctx.io, { at: now.toISOString(), outboxes } satisfies StatusOutput);
          else ctx.io.stdout.write(statusTable(outboxes, now));
          const poisoned = outboxes.filter((s) => s.poisoned > 0);
          if (!options.check || poisoned.length === 0) return EXIT.ok;
          const where = poisoned
            .map((s) => `${s.name} ${withPart(s.poisoned, s.poisonedByCause.refused, 'refused')}`)
            .join(', ');
          const refused = poisoned.some((s) => s.poisonedByCause.refused > 0)
            ? ', with --refused once the cause of the refusals is fixed'
            : '';
          ctx.io.stderr.write(
            `${ctx.name}: poisoned rows: ${where} (see \`${ctx.name} list --state poisoned\`, then \`${ctx.name} redrive\`${refused})\n`,
          );
          return EXIT.problem;
        });
      }),
    );
  return command;
}
