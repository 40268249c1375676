import { awaitDelivered, decodeOutboxToken, OutboxTokenError, type IntentOutcome } from '@outbox/outbox';
import type { Command } from 'commander';
import { CliError } from './cli-error.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith } from './command-line.js';
import { durationOption, formatRelative } from './durations.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { CheckedConfig } from './config.js';
import type { TokenOutput } from './output-schemas.js';
import type { Target } from './targets.js';

interface TokenOptions extends TargetOptions {
  readonly json?: boolean;
  readonly wait: number;
}

/** The line of one intent: where it is, and what a person can do about it. */
function outcomeText(intent: IntentOutcome, now: Date): string {
  switch (intent.status) {
    case 'delivered':
      return `delivered ${formatRelative(intent.deliveredAt, now)}`;
    case 'superseded':
      return 'superseded: a later delivered intent of its partition covers it (retire it, never revive it)';
    case 'poisoned':
      return `poisoned (${intent.cause}${intent.code ? `: ${intent.code}` : ''}): ${intent.lastError ?? 'no error recorded'}`;
    case 'blocked':
      return `waiting behind poisoned #${intent.blockedBy} of its partition (see \`outbox show ${intent.blockedBy}\`)`;
    case 'retired':
      return `${intent.closedAs ?? 'retired'}: ${intent.reason ?? ''}`;
    default:
      return 'pending: not delivered yet';
  }
}

/** The token's outboxes as targets of the config, by table: they must all be there. */
function targetsOf(token: string, config: CheckedConfig): string[] {
  return decodeToken(token).outboxes.map((outbox) => {
    const found = config.outboxes.find((o) => o.spec.table === outbox.table);
    if (!found) {
      throw new CliError(
        `the token names ${outbox.table}, which ${config.source} does not have`,
        `have: ${config.outboxes.map((o) => o.spec.table).join(', ')}`,
        EXIT.usage,
      );
    }
    return found.name;
  });
}

function decodeToken(token: string) {
  try {
    return decodeOutboxToken(token);
  } catch (error) {
    throw new CliError(
      error instanceof Error ? error.message : String(error),
      'pass the Outbox-Token a write answered with',
      EXIT.usage,
    );
  }
}

/** `outbox token TOKEN`: what became of a write, from the token it answered with. */
export function defineToken(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary("what became of a write's intents, from its Outbox-Token")
    .description(
      "Shows each intent of a consistency token (a service's Outbox-Token header): delivered and when, poisoned and why, waiting behind a poisoned one, superseded, retired, or pending. Exit 0 when all are delivered, 1 otherwise.",
    )
    .argument('<token>', 'the token (ot1.…)')
    .addOption(durationOption('--wait <duration>', 'wait this long for pending intents (e.g. 10s)', 600_000, 0))
    .action(
      exitWith(ctx.box, async (token: string, options: TokenOptions): Promise<ExitCode> => {
        return onTargets(
          options,
          ctx,
          async (targets: readonly Target[]) => {
            const [first] = targets;
            if (!first) throw new Error('no outbox selected');
            let result;
            try {
              result = await awaitDelivered(first.db, token, {
                timeoutMs: options.wait,
                outboxes: targets.map((t) => t.spec),
              });
            } catch (error) {
              if (!(error instanceof OutboxTokenError)) throw error;
              const hint =
                error.kind === 'compacted'
                  ? 'compaction deletes only rows delivered longer ago than the retention: treat them as delivered'
                  : `the token's database and table as this config reaches them: ${first.database}`;
              throw new CliError(error.message, hint, EXIT.problem, { cause: error });
            }
            const outboxOf = new Map(targets.map((t) => [t.spec.table, t.name]));
            const output: TokenOutput = {
              settled: result.settled,
              delivered: result.delivered,
              newestDeliveryAgeMs: result.newestDeliveryAgeMs ?? null,
              intents: result.intents.map((intent) => {
                const { table, id, status, ...rest } = intent;
                const detail = 'deliveredAt' in rest ? { ...rest, deliveredAt: rest.deliveredAt.toISOString() } : rest;
                return { outbox: outboxOf.get(table) ?? table, table, id, status, ...detail };
              }),
            };
            if (options.json) printJson(ctx.io, output);
            else {
              const now = new Date();
              for (const intent of result.intents)
                ctx.io.stdout.write(
                  `${outboxOf.get(intent.table) ?? intent.table} #${intent.id}  ${outcomeText(intent, now)}\n`,
                );
            }
            return result.delivered ? EXIT.ok : EXIT.problem;
          },
          (config) => targetsOf(token, config),
        );
      }),
    );
  return command;
}
