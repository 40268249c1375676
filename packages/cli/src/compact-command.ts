import { createReconciler, type CompactionResult } from '@outbox/reconciler';
import type { Command } from 'commander';
import { actionTraces, addActorOption, type ActorOptions } from './actor-option.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { durationOption, durationText } from './durations.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { CompactOutput } from './output-schemas.js';
import { silentLogger } from './silent-logger.js';

interface CompactOptions extends TargetOptions, ActorOptions {
  readonly json?: boolean;
  readonly dryRun?: boolean;
  readonly retention: number;
  readonly closedRetention?: number;
  readonly batchSize: number;
}

type Outcome = CompactOutput['outboxes'][number];

const DAY_MS = 86_400_000;
/** compactOutbox's own default: "was it written, and when?" for the last month. */
const DEFAULT_RETENTION_MS = 30 * DAY_MS;
/** compactOutbox's bound: a century. */
const MAX_RETENTION_MS = 36_500 * DAY_MS;

/** The rows of one kind a run looks at: `delivered rows sent more than 30d ago`. */
const older = (rows: string, verb: string, ms: number) =>
  ms === 0 ? `${rows} of any age` : `${rows} ${verb} more than ${durationText(ms)} ago`;

function outcomeText(o: Outcome, dryRun: boolean): string {
  if (o.skipped)
    return `${o.name}: skipped: another compaction of ${o.table} holds its lock (a service's reconciler compacts on its timer); nothing deleted\n`;
  const what = `${dryRun ? 'would delete' : 'deleted'} ${o.deleted} row(s): ${o.delivered} delivered, ${o.closed} retired or discarded`;
  return `${o.name}: ${what}; ${o.scanned} scanned in ${o.batches} batch(es)${dryRun ? ' (dry run: nothing deleted)' : ''}\n`;
}

/** `outbox compact`: deletes old delivered and closed rows, never one a decision still reads. */
export function defineCompact(command: Command, ctx: CommandContext): Command {
  addActorOption(addTargetOptions(command, ctx))
    .summary('delete old delivered, retired and discarded rows (never one a decision reads)')
    .description(
      `Runs compactOutbox (${docsUrl('ledger.md#compaction')}): deletes delivered rows older than --retention and retired or discarded ` +
        'rows closed longer ago than --closed-retention, but never the last delivered row of a partition, a row after a pending ' +
        'row of its partition, or one the late-write check marks. Small batches, each its own transaction, no lock a drainer waits for.',
    )
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .addOption(
      durationOption(
        '--retention <duration>',
        'keep delivered rows this long (30d, 12h, 90m, 0)',
        MAX_RETENTION_MS,
        DEFAULT_RETENTION_MS,
      ),
    )
    .addOption(
      durationOption(
        '--closed-retention <duration>',
        'keep retired and discarded rows this long after they were closed (default: --retention)',
        MAX_RETENTION_MS,
      ),
    )
    .option('--batch-size <n>', 'rows looked at per transaction', integerArgument(1, 10_000), 1_000)
    .action(
      exitWith(ctx.box, async (options: CompactOptions): Promise<ExitCode> => {
        const retentionMs = options.retention;
        const closedRetentionMs = options.closedRetention ?? retentionMs;
        const dryRun = options.dryRun === true;
        const record = actionTraces(options, ctx.io, 'compact', { dryRun }); // before anything is deleted
        return onTargets(options, ctx, async (targets) => {
          const output: CompactOutput = { dryRun, retentionMs, closedRetentionMs, outboxes: [] };
          if (!options.json) {
            ctx.io.stdout.write(
              `${dryRun ? 'would delete' : 'deleting'} ${older('delivered rows', 'sent', retentionMs)} and ${older('retired or discarded rows', 'closed', closedRetentionMs)}, ` +
                "except each partition's last delivered row and every row after its first pending one\n",
            );
          }
          for (const target of targets) {
            // The reconciler's compact verifies the table first: a table that is not an outbox is exit 2, not a delete.
            const result: CompactionResult = await createReconciler({
              db: target.db,
              spec: target.spec,
              logger: silentLogger,
            }).compact({
              retentionMs,
              closedRetentionMs,
              batchSize: options.batchSize,
              dryRun,
              record: record(target.spec),
            });
            const { deleted, delivered, closed, scanned, batches, skipped } = result;
            const outcome = {
              name: target.name,
              table: target.spec.table,
              deleted,
              delivered,
              closed,
              scanned,
              batches,
              skipped,
            };
            output.outboxes.push(outcome);
            if (!options.json) ctx.io.stdout.write(outcomeText(outcome, dryRun));
          }
          if (options.json) printJson(ctx.io, output);
          return EXIT.ok;
        });
      }),
    );
  return command;
}
