import { repairOutbox } from '@outbox/reconciler';
import type { Command } from 'commander';
import { actionTraces, addActorOption, type ActorOptions } from './actor-option.js';
import { tupleText } from './audit-command.js';
import { eachOwnedTarget } from './audit-reader.js';
import {
  addTargetOptions,
  collect,
  onTargets,
  printJson,
  type CommandContext,
  type TargetOptions,
} from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { RepairOutput } from './output-schemas.js';

interface RepairOptions extends TargetOptions, ActorOptions {
  readonly json?: boolean;
  readonly apply?: boolean;
  readonly maxDeletes: number;
  readonly partition?: string[];
  readonly sample: number;
}

type RepairOutbox = RepairOutput['outboxes'][number];

function repairText(r: RepairOutbox): string {
  const totals = `${r.intents} intent(s) in ${r.partitions} partition(s): ${r.writes} write(s), ${r.deletes} delete(s); ${r.skippedPending} skipped as pending`;
  const lines = [
    r.dryRun
      ? `${r.name}: would enqueue ${totals}${r.withinBudget ? '' : ` — OVER --max-deletes ${r.maxDeletes}`}${r.partitions > 0 ? ' (dry run: pass --apply to enqueue)' : ''}`
      : `${r.name}: enqueued ${totals}${r.enqueued.length > 0 ? ` (ids ${r.enqueued.join(', ')}); the drainers deliver them` : ''}`,
  ];
  for (const c of r.sample) {
    for (const t of c.writes) lines.push(`  write   ${tupleText(t)}`);
    for (const t of c.deletes) lines.push(`  delete  ${tupleText(t)}`);
  }
  return `${lines.join('\n')}\n`;
}

/** `outbox repair`: plans (default) or enqueues the corrections an audit finds. */
export function defineRepair(command: Command, ctx: CommandContext): Command {
  addActorOption(addTargetOptions(command, ctx))
    .summary('correct drift through the outbox (dry run unless --apply)')
    .description(
      'Repairs drift by enqueuing correcting intents into the owning outbox (never writing to OpenFGA itself), decided under the ' +
        "partitions' locks. A dry run by default: exit 1 while corrections are planned. --apply enqueues them; more deletes than " +
        '--max-deletes refuses the run (exit 1) before anything is enqueued. What --apply enqueues is one row of the actions log.',
    )
    .option('--apply', 'enqueue the corrections (default: a dry run)')
    .option('--max-deletes <n>', 'most tuple deletes one run may enqueue', integerArgument(0, 1_000_000), 100)
    .option(
      '--partition <key>',
      'repair only this partition; repeatable (default: audit the whole outbox first)',
      collect,
    )
    .option('--sample <n>', 'corrections listed per outbox', integerArgument(0, 1_000), 20)
    .action(
      exitWith(ctx.box, async (options: RepairOptions): Promise<ExitCode> => {
        const record = actionTraces(options, ctx.io, 'repair', { dryRun: !options.apply });
        return onTargets(options, ctx, async (targets, config) => {
          const outboxes = await eachOwnedTarget(
            targets,
            config,
            ctx,
            'repair',
            options.json,
            async (target, owner, reader) => {
              const { outbox, ...rest } = await repairOutbox({
                db: target.db,
                spec: target.spec,
                owner,
                reader,
                dryRun: !options.apply,
                maxDeletes: options.maxDeletes,
                sampleSize: options.sample,
                record: record(target.spec),
                ...(options.partition ? { partitionKeys: options.partition } : {}),
              });
              const r = {
                name: target.name,
                table: outbox,
                ...rest,
                enqueued: [...rest.enqueued],
                sample: [...rest.sample],
              } as RepairOutbox;
              if (!options.json) ctx.io.stdout.write(repairText(r));
              return r;
            },
          );
          const output: RepairOutput = { dryRun: !options.apply, outboxes };
          if (options.json) printJson(ctx.io, output);
          const planned = output.outboxes.some((r) => !r.withinBudget || (r.dryRun && r.partitions > 0));
          return planned ? EXIT.problem : EXIT.ok;
        });
      }),
    );
  return command;
}
