import type { OutboxActionTrace } from '@outbox/outbox';
import { createReconciler, type RedriveResult } from '@outbox/reconciler';
import type { Command } from 'commander';
import { sql } from 'kysely';
import { actionTraces, addActorOption, type ActorOptions } from './actor-option.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { intentOutput, type IntentOutput, type RedriveOutput } from './output-schemas.js';
import { silentLogger } from './silent-logger.js';
import type { Target } from './targets.js';
import { cut } from './text-table.js';

interface RedriveOptions extends TargetOptions, ActorOptions {
  readonly json?: boolean;
  readonly dryRun?: boolean;
  readonly refused?: boolean;
  readonly maxPasses: number;
}

type Outcome = RedriveOutput['outboxes'][number];

/** How many ids of each kind the human output names (--json names them all). */
const NAMED = 10;

/**
 * Passes while one revives rows and reports more (a batch is at most 500 rows), at most `maxPasses`;
 * each pass that changes rows records them in `record`'s one row of the actions log, in its transaction.
 */
async function redriveTarget(
  target: Target,
  options: RedriveOptions,
  record: OutboxActionTrace | undefined,
): Promise<Outcome> {
  const reconciler = createReconciler({ db: target.db, spec: target.spec, logger: silentLogger });
  // A dry run reads one snapshot, takes no lock and changes nothing (the reconciler's dryRun). The
  // refused request is stored on the rows, so the passes after the first need not repeat it.
  const pass = (first: boolean) =>
    reconciler.redrivePoisoned({
      ...(options.dryRun ? { dryRun: true } : { record }),
      ...(options.refused && first ? { refused: true, reason: 'operator' } : {}),
    });
  const outcome: Outcome = {
    name: target.name,
    table: target.spec.table,
    revived: [],
    superseded: [],
    deferred: [],
    waiting: [],
    skipped: false,
    more: false,
    moreSuperseded: false,
    moreWaiting: false,
  };
  const seen = new Set<string>();
  for (let passes = 1; ; passes += 1) {
    const result: RedriveResult = await pass(passes === 1);
    outcome.revived.push(...result.revived.map(intentOutput));
    // A superseded, deferred or waiting row is reported by every pass: list it once.
    for (const kind of ['superseded', 'deferred'] as const) {
      for (const intent of result[kind])
        if (!seen.has(`${kind} ${intent.id}`) && seen.add(`${kind} ${intent.id}`))
          outcome[kind].push(intentOutput(intent));
    }
    for (const intent of result.waiting ?? []) {
      if (!seen.has(`waiting ${intent.id}`) && seen.add(`waiting ${intent.id}`)) {
        outcome.waiting.push({
          ...intentOutput(intent),
          requested: intent.requested,
          reviveAfter: intent.reviveAfter?.toISOString() ?? null,
        });
      }
    }
    outcome.skipped ||= result.skipped;
    outcome.more = result.more;
    outcome.moreSuperseded ||= result.moreSuperseded;
    outcome.moreWaiting ||= result.moreWaiting === true;
    if (options.dryRun || !result.more || result.revived.length === 0 || passes >= options.maxPasses) break;
  }
  // A revival is an UPDATE: no NOTIFY fires. Wake the listening drainers, as the services do after SIGHUP.
  if (!options.dryRun && outcome.revived.length > 0)
    await sql`select pg_notify(${target.spec.channel}, '')`.execute(target.db);
  return outcome;
}

const named = (intents: readonly IntentOutput[], withError: boolean) =>
  intents
    .slice(0, NAMED)
    .map((i) => `    #${i.id} ${i.partitionKey}${withError && i.lastError ? `: ${cut(i.lastError, 80)}` : ''}`)
    .concat(intents.length > NAMED ? [`    … and ${intents.length - NAMED} more`] : []);

function outcomeText(o: Outcome, dryRun: boolean, program: string): string {
  if (o.skipped && o.revived.length === 0)
    return `${o.name}: skipped: another redrive pass was running (its process reports it)\n`;
  const verb = dryRun ? 'would revive' : 'revived';
  const waiting = o.waiting.length > 0 ? `, waiting ${o.waiting.length}` : '';
  const lines = [
    `${o.name}: ${verb} ${o.revived.length}, superseded ${o.superseded.length}, deferred ${o.deferred.length}${waiting}${o.more ? ' (more remain: run it again)' : ''}`,
  ];
  if (o.revived.length > 0) lines.push(`  ${verb}:`, ...named(o.revived, false));
  if (o.superseded.length > 0) {
    lines.push(
      '  superseded (a later intent of the partition was delivered; never revived):',
      ...named(o.superseded, true),
    );
    lines.push(
      `  retire them: ${program} retire --outbox ${o.name} ${o.superseded
        .slice(0, NAMED)
        .map((i) => i.id)
        .join(' ')} --reason "…"`,
    );
  }
  if (o.deferred.length > 0)
    lines.push('  deferred (a drainer held the partition; the next pass decides):', ...named(o.deferred, false));
  if (o.waiting.length > 0) {
    const when = o.waiting.some((w) => w.requested)
      ? 'asked to retry: revived once their spacing passed'
      : 'retried only when asked: fix the cause, then pass --refused';
    lines.push(`  waiting (refused by OpenFGA; ${when}):`, ...named(o.waiting, true));
    lines.push(
      `  or discard them: ${program} discard --outbox ${o.name} ${o.waiting
        .slice(0, NAMED)
        .map((i) => i.id)
        .join(' ')} --reason "…"`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** `outbox redrive`: the reconciler's pass, now. */
export function defineRedrive(command: Command, ctx: CommandContext): Command {
  addActorOption(addTargetOptions(command, ctx))
    .summary('revive poisoned intents (never past a delivered successor)')
    .description(
      `Runs the reconciler's redrive pass (design §6: ${docsUrl('design.md#6-reconciler-the-redrive-rule')}): poisoned intents without a delivered successor are reset to ` +
        `deliverable and the drainers woken; superseded ones are reported for retire, refused ones (${docsUrl('ledger.md')}) left waiting ` +
        'unless --refused. Passes repeat while one revives a full batch. What they change is one row of the actions log.',
    )
    .option('--dry-run', 'decide and report from one snapshot; change and lock nothing')
    .option(
      '--refused',
      'also retry the rows OpenFGA refused for good (after a model fix), each once its spacing passed',
    )
    .option('--max-passes <n>', 'at most this many passes per outbox', integerArgument(1, 10_000), 20)
    .action(
      exitWith(ctx.box, async (options: RedriveOptions): Promise<ExitCode> => {
        const record = actionTraces(options, ctx.io, 'redrive', { dryRun: options.dryRun === true });
        return onTargets(options, ctx, async (targets) => {
          const output: RedriveOutput = {
            dryRun: options.dryRun === true,
            refused: options.refused === true,
            outboxes: [],
          };
          for (const target of targets) {
            const outcome = await redriveTarget(target, options, record(target.spec));
            output.outboxes.push(outcome);
            if (!options.json) ctx.io.stdout.write(outcomeText(outcome, output.dryRun, ctx.name));
          }
          if (options.json) printJson(ctx.io, output);
          return EXIT.ok;
        });
      }),
    );
  return command;
}
