import type { TupleKey } from '@outbox/outbox';
import { auditOutbox, auditOutboxIncremental, type AuditReport } from '@outbox/reconciler';
import type { Command } from 'commander';
import { eachOwnedTarget } from './audit-reader.js';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import type { AuditOutput } from './output-schemas.js';

interface AuditOptions extends TargetOptions {
  readonly json?: boolean;
  readonly incremental?: boolean;
  readonly sample: number;
}

type AuditOutbox = AuditOutput['outboxes'][number];

/** `user relation object`, as OpenFGA's docs write a tuple. */
export const tupleText = (t: TupleKey) =>
  `${t.user} ${t.relation} ${t.object}${t.condition ? ` [${t.condition.name}]` : ''}`;

function auditJson(name: string, report: AuditReport): AuditOutbox {
  const { outbox, startedAt, ...rest } = report;
  return {
    name,
    table: outbox,
    ...rest,
    objectTypes: [...rest.objectTypes],
    startedAt: startedAt.toISOString(),
  } as AuditOutbox;
}

function auditText(a: AuditOutbox): string {
  const head = `compared ${a.partitionsCompared} partition(s), ${a.skippedPending} skipped as pending, ${a.reads.tuplePages + a.reads.partitionReads + a.reads.changePages} OpenFGA read(s)`;
  if (a.drifted === 0) return `${a.name}: OpenFGA agrees with the owner (${a.mode}; ${head})\n`;
  const lines = [
    `${a.name}: DRIFT in ${a.drifted} partition(s) (${a.mode}; ${head}): ` +
      `missing ${a.missing.tuples} tuple(s), unexpected ${a.unexpected.tuples}, orphans ${a.orphans.tuples} on ${a.orphans.objects} object(s)`,
  ];
  for (const s of a.missing.sample) for (const t of s.tuples) lines.push(`  missing     ${tupleText(t)}`);
  for (const s of a.unexpected.sample) for (const t of s.tuples) lines.push(`  unexpected  ${tupleText(t)}`);
  for (const s of a.orphans.sample) for (const t of s.tuples) lines.push(`  orphan      ${tupleText(t)}`);
  return `${lines.join('\n')}\n`;
}

/** `outbox audit`: compares the owner's expected tuples with OpenFGA's. */
export function defineAudit(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary("compare the owner's expected tuples with OpenFGA (exit 1 on drift)")
    .description(
      `Audits each outbox (design §9: ${docsUrl('design.md#9-agreement-owner-ledger-and-openfga')}; ${docsUrl('agreement.md')}): the tuples the owner's rows imply against those OpenFGA holds — ` +
        'missing, unexpected and orphan tuples. Read-only. Needs an owner mapping per outbox in the config. Exit 1 when drift is found.',
    )
    .option(
      '--incremental',
      'read only what changed since the last incremental audit (needs the cursor table, auditCursorTableDdl)',
    )
    .option('--sample <n>', 'drifted partitions (and tuples each) listed per kind', integerArgument(0, 1_000), 20)
    .action(
      exitWith(ctx.box, async (options: AuditOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets, config) => {
          const outboxes = await eachOwnedTarget(
            targets,
            config,
            ctx,
            'audit',
            options.json,
            async (target, owner, reader) => {
              const audit = { db: target.db, spec: target.spec, owner, reader, sampleSize: options.sample };
              const a = auditJson(
                target.name,
                options.incremental ? await auditOutboxIncremental(audit) : await auditOutbox(audit),
              );
              if (!options.json) ctx.io.stdout.write(auditText(a));
              return a;
            },
          );
          const output: AuditOutput = { drifted: outboxes.reduce((n, a) => n + a.drifted, 0), outboxes };
          if (options.json) printJson(ctx.io, output);
          return output.drifted > 0 ? EXIT.problem : EXIT.ok;
        });
      }),
    );
  return command;
}
