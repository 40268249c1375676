import { createDrainer, type DrainResult } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { outboxStats } from '@outbox/outbox';
import { tableNames } from '@outbox/outbox/protocol';
import type { Command } from 'commander';
import { sql } from 'kysely';
import { addTargetOptions, onTargets, printJson, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { checkOpenFga, openFgaConnection, type OpenFgaConnection } from './openfga-connection.js';
import type { DrainOutbox, DrainOutput } from './output-schemas.js';
import { progress } from './progress.js';
import type { Target } from './targets.js';

interface DrainOptions extends TargetOptions {
  readonly json?: boolean;
  readonly untilEmpty?: boolean;
  readonly maxPasses: number;
}

/** How many delivered intents the human summary names, one line each (the rest are counted). */
const NAMED_DELIVERIES = 10;

interface Drained extends DrainOutbox {
  readonly deliveredIds: readonly string[];
}

const COUNTS = ['batches', 'claimed', 'delivered', 'retried', 'poisoned', 'released'] as const;

async function drainTarget(
  target: Target,
  openfga: OpenFgaConnection,
  modelId: string,
  options: DrainOptions,
  ctx: CommandContext,
): Promise<Drained> {
  const deliveredIds: string[] = [];
  let haltReason: string | null = null;
  const total = (await outboxStats(target.db, target.spec)).deliverable;
  const bar = progress(ctx.io, target.name, options.json);
  let done = 0;
  const drainer = createDrainer({
    db: target.db,
    spec: target.spec,
    sink: createOpenFgaSink({
      apiUrl: openfga.apiUrl,
      storeId: openfga.storeId,
      authorizationModelId: modelId,
      ...(openfga.credentials ? { credentials: openfga.credentials } : {}),
    }),
    logger: {
      info: () => undefined,
      warn: (message) => void ctx.io.stderr.write(`${ctx.name}: ${target.name}: ${message}\n`),
      error: (message) => void ctx.io.stderr.write(`${ctx.name}: ${target.name}: ${message}\n`),
    },
    onEvent: (event) => {
      if (event.type === 'delivered') {
        deliveredIds.push(...event.ids);
        done += event.ids.length;
        bar.update(done, total);
      }
      if (event.type === 'pass-failed' && event.halted) haltReason = event.error.message;
    },
  });
  const sums = { batches: 0, claimed: 0, delivered: 0, retried: 0, poisoned: 0, released: 0 };
  let passes = 0;
  let halted = false;
  try {
    for (;;) {
      const result: DrainResult = await drainer.drainOnce();
      passes += 1;
      for (const key of COUNTS) sums[key] += result[key];
      halted ||= result.halted;
      if (!options.untilEmpty || halted || result.delivered === 0 || passes >= options.maxPasses) break;
    }
  } finally {
    bar.end();
    await drainer.stop();
  }
  const left = await outboxStats(target.db, target.spec);
  return {
    name: target.name,
    table: target.spec.table,
    passes,
    ...sums,
    halted,
    haltReason,
    left: { deliverable: left.deliverable, poisoned: left.poisoned },
    deliveredIds,
  };
}

/** The first delivered intents, one line each: `#12 vpc:…: 2 write(s), 0 delete(s)`. */
async function deliveredLines(target: Target, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const names = tableNames(target.spec);
  const named = ids.slice(0, NAMED_DELIVERIES);
  const rows = await sql<{ id: string; key: string; payload: { writes?: unknown[]; deletes?: unknown[] } }>`
    select id::text as id, ${sql.raw(names.partition)} as key, payload from ${sql.raw(names.table)} where id = any(${named}::bigint[]) order by id`.execute(
    target.db,
  );
  const lines = rows.rows.map(
    (r) =>
      `  #${r.id} ${r.key}: ${r.payload.writes?.length ?? 0} write(s), ${r.payload.deletes?.length ?? 0} delete(s)`,
  );
  if (ids.length > named.length) lines.push(`  … and ${ids.length - named.length} more`);
  return lines;
}

function summary(d: DrainOutbox): string {
  const halt = d.halted
    ? ` HALTED, nothing counted for the halted batch: ${d.haltReason ?? 'the sink stopped the pass'}`
    : '';
  return (
    `${d.table}: delivered ${d.delivered}, retried ${d.retried}, poisoned ${d.poisoned} in ${d.passes} pass${d.passes === 1 ? '' : 'es'}${halt}; ` +
    `left ${d.left.deliverable} deliverable, ${d.left.poisoned} poisoned`
  );
}

/** `outbox drain`: delivers what is deliverable now, without a service running. */
export function defineDrain(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx)
    .summary('deliver the backlog to OpenFGA now (one pass, or until empty)')
    .description(
      "Delivers each outbox's deliverable intents to OpenFGA: one drain pass (batches until nothing is claimable), or with --until-empty " +
        'passes until one delivers nothing. Safe beside running drainers (SKIP LOCKED). Checks the OpenFGA store and model first. ' +
        'Exit 1 when an intent was poisoned or the sink halted.',
    )
    .option('--until-empty', 'run passes until one delivers nothing (or --max-passes)')
    .option('--max-passes <n>', 'with --until-empty: at most this many passes', integerArgument(1, 100_000), 100)
    .action(
      exitWith(ctx.box, async (options: DrainOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets, config) => {
          const openfga = openFgaConnection(config, ctx.io.env, 'drain');
          const modelId = await checkOpenFga(openfga);
          const drained: Drained[] = [];
          for (const target of targets) {
            const d = await drainTarget(target, openfga, modelId, options, ctx);
            drained.push(d);
            if (!options.json)
              ctx.io.stdout.write([summary(d), ...(await deliveredLines(target, d.deliveredIds))].join('\n') + '\n');
          }
          const ok = drained.every((d) => d.poisoned === 0 && !d.halted);
          if (options.json)
            printJson(ctx.io, { ok, outboxes: drained.map(({ deliveredIds: _, ...d }) => d) } satisfies DrainOutput);
          return ok ? EXIT.ok : EXIT.problem;
        });
      }),
    );
  return command;
}
