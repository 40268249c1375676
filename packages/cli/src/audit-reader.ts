import { createOpenFgaTupleReader } from '@outbox/openfga';
import type { OutboxOwner, TupleReader } from '@outbox/reconciler';
import { CliError } from './cli-error.js';
import type { CliIo } from './cli-io.js';
import { EXIT } from './exit-codes.js';
import type { OpenFgaConnection } from './openfga-connection.js';
import { progress } from './progress.js';
import type { Target } from './targets.js';

/** The owner `audit` and `repair` compare with, or a usage error saying the config gives none. */
export function ownerOf(target: Target, source: string, command: string): OutboxOwner {
  if (target.owner) return target.owner;
  throw new CliError(`${command} of ${target.name} needs an owner mapping, and ${source} gives none`, `set outboxes.${target.name}.owner to an OutboxOwner, in a .ts or .mjs config`, EXIT.usage);
}

/**
 * The OpenFGA reader of an audit or repair, counting its requests on a progress line (a terminal
 * only): the audit's cost is its reads, so that is what moves.
 */
export function countingReader(connection: OpenFgaConnection, io: CliIo, label: string, json: boolean | undefined): { reader: TupleReader; end(): void } {
  const inner = createOpenFgaTupleReader({ apiUrl: connection.apiUrl, storeId: connection.storeId, ...(connection.credentials ? { credentials: connection.credentials } : {}) });
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
