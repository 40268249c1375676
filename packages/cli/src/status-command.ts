import { tableNames } from '@outbox/outbox/protocol';
import type { Command } from 'commander';
import { sql } from 'kysely';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { formatDuration, formatRelative } from './durations.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { StatusOutbox, StatusOutput } from './output-schemas.js';
import { outboxStatus, stateFilterSql } from '@outbox/reconciler';
import type { Target } from './targets.js';
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

/** One outbox's counts as `status --check` reads them. */
export interface CheckCounts extends Pick<StatusOutbox, 'name' | 'poisoned' | 'poisonedByCause' | 'superseded'> {
  /** The refused rows among the poisoned ones no delivered successor covers: what `redrive --refused` would revive. */
  readonly refusedRevivable: number;
}

/** The refused poisoned rows no delivered successor covers (the superseded ones are retired, not redriven). */
async function refusedRevivableCount(target: Target): Promise<number> {
  const result = await sql<{ n: string }>`
    select count(*) as n from ${sql.raw(tableNames(target.spec).table)} t
    where ${stateFilterSql(target.spec, 'poisoned')} and t.poison_cause = 'refused'
      and not ${stateFilterSql(target.spec, 'superseded')}`.execute(target.db);
  return Number(result.rows[0]?.n ?? 0);
}

/**
 * `status --check`'s line for outboxes with poisoned rows: where they are, and the action each kind
 * needs — `redrive` for those no delivered successor covers (with `--refused` when OpenFGA refused
 * some of them), `retire` for the superseded ones, which a redrive never revives. `--outbox` is
 * named when the config has several outboxes (retire works on one).
 *
 * @example
 * checkLine('outbox', [{ name: 'storage', poisoned: 1, superseded: 1, … }], true);
 * // 'outbox: poisoned rows: storage 1 (1 superseded) (all superseded: … `outbox retire --outbox storage IDS --reason TEXT`)'
 */
export function checkLine(program: string, poisoned: readonly CheckCounts[], several: boolean): string {
  const where = poisoned
    .map((s) => {
      const parts = [
        s.poisonedByCause.refused > 0 ? `${s.poisonedByCause.refused} refused` : '',
        s.superseded > 0 ? `${s.superseded} superseded` : '',
      ].filter(Boolean);
      return `${s.name} ${s.poisoned}${parts.length > 0 ? ` (${parts.join(', ')})` : ''}`;
    })
    .join(', ');
  const revivable = poisoned.filter((s) => s.poisoned > s.superseded);
  const superseded = poisoned.filter((s) => s.superseded > 0).map((s) => s.name);
  const refused = revivable.some((s) => s.refusedRevivable > 0)
    ? ', with --refused once the cause of the refusals is fixed'
    : '';
  const redrive = `\`${program} list --state poisoned\`, then \`${program} redrive\`${refused}`;
  const outbox = !several ? '' : superseded.length === 1 ? ` --outbox ${superseded[0]}` : ' --outbox NAME';
  const each = several && superseded.length > 1 ? ` for each of ${superseded.join(', ')}` : '';
  const retire = `\`${program} list --state superseded\`, then \`${program} retire${outbox} IDS --reason TEXT\`${each}`;
  const hint =
    superseded.length === 0
      ? `see ${redrive}`
      : revivable.length === 0
        ? `all superseded: a delivered later intent covers each, so retire them, never redrive: see ${retire}`
        : `see ${redrive}; retire the superseded ones, never redrive them: ${retire}`;
  return `${program}: poisoned rows: ${where} (${hint})`;
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
        return onTargets(options, ctx, async (targets, config) => {
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
          if (!options.check) return EXIT.ok;
          const poisoned: CheckCounts[] = [];
          for (const [i, s] of outboxes.entries()) {
            const target = targets[i];
            if (s.poisoned === 0 || !target) continue;
            // Whether a refused row is among the revivable ones: only counted when it can be either.
            const refusedRevivable =
              s.poisonedByCause.refused === 0 || s.superseded === 0
                ? s.poisonedByCause.refused
                : await refusedRevivableCount(target);
            poisoned.push({ ...s, refusedRevivable });
          }
          if (poisoned.length === 0) return EXIT.ok;
          ctx.io.stderr.write(`${checkLine(ctx.name, poisoned, config.outboxes.length > 1)}\n`);
          return EXIT.problem;
        });
      }),
    );
  return command;
}
