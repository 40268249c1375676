import { createOpenFgaTupleReader } from '@outbox/openfga';
import type { OutboxOwner, TupleReader } from '@outbox/reconciler';
import { CliError } from './cli-error.js';
import type { CliIo } from './cli-io.js';
import type { CommandContext } from './command-context.js';
import type { CheckedConfig } from './config.js';
import { EXIT } from './exit-codes.js';
import { checkOpenFga, openFgaConnection, type OpenFgaConnection } from './openfga-connection.js';
import { progress } from './progress.js';
import type { Target } from './targets.js';

/** The owner `audit` and `repair` compare with, or a usage error saying the config gives none. */
export function ownerOf(target: Target, source: string, command: string): OutboxOwner {
  if (target.owner) return target.owner;
  throw new CliError(
    `${command} of ${target.name} needs an owner mapping, and ${source} gives none`,
    `set outboxes.${target.name}.owner to an OutboxOwner, in a .ts or .mjs config`,
    EXIT.usage,
  );
}

/**
 * The OpenFGA reader of an audit or repair, counting its requests on a progress line (a terminal
 * only): the audit's cost is its reads, so that is what moves.
 */
export function countingReader(
  connection: OpenFgaConnection,
  io: CliIo,
  label: string,
  json: boolean | undefined,
): { reader: TupleReader; end(): void } {
  const inner = createOpenFgaTupleReader({
    apiUrl: connection.apiUrl,
    storeId: connection.storeId,
    ...(connection.credentials ? { credentials: connection.credentials } : {}),
  });
  const bar = progress(io, label, json);
  let reads = 0;
  const counted =
    <A extends unknown[], R>(read: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      reads += 1;
      bar.update(reads, undefined, 'OpenFGA reads');
      return read(...args);
    };
  return {
    reader: {
      readObjectTypes: counted(inner.readObjectTypes.bind(inner)),
      readTuples: counted(inner.readTuples.bind(inner)),
      readChanges: counted(inner.readChanges.bind(inner)),
    },
    end: () => bar.end(),
  };
}

/**
 * What `audit` and `repair` share: every target's owner and OpenFGA checked before any work (a
 * missing owner is exit 2, an unreachable OpenFGA exit 3), then `work` per target with a counting
 * reader, in order.
 */
export async function eachOwnedTarget<T>(
  targets: readonly Target[],
  config: CheckedConfig,
  ctx: CommandContext,
  command: 'audit' | 'repair',
  json: boolean | undefined,
  work: (target: Target, owner: OutboxOwner, reader: TupleReader) => Promise<T>,
): Promise<T[]> {
  const openfga = openFgaConnection(config, ctx.io.env, command);
  const owners = targets.map((target) => ownerOf(target, config.source, command));
  await checkOpenFga(openfga);
  const results: T[] = [];
  for (const [i, target] of targets.entries()) {
    const { reader, end } = countingReader(
      openfga,
      ctx.io,
      `${command === 'audit' ? 'auditing' : 'repairing'} ${target.name}`,
      json,
    );
    try {
      results.push(await work(target, owners[i] as OutboxOwner, reader));
    } finally {
      end();
    }
  }
  return results;
}
