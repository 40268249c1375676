// The drainer whose memory `pnpm bench memory` watches, in a process of its own (run with
// `node --import tsx`): LISTEN, defaults, the OpenFGA sink. It reports its memory every second
// over IPC, collects garbage and reports the live heap when asked (twice a run), writes a heap
// snapshot when asked (after the sampling: a snapshot's own buffers move the RSS), and stops when asked.
import { createDrainer, type DrainerEvent } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { defineOutbox } from '@outbox/outbox';
import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8';
import { kysely } from './bench-db.js';
import { credentialsOf } from './openfga-credentials.js';

/** What the parent passes (one JSON argument). */
export interface MemoryDrainerConfig {
  readonly databaseUrl: string;
  readonly table: string;
  readonly apiUrl: string;
  readonly storeId: string;
  readonly token: string | undefined;
}

/** Parent → drainer. */
export type MemoryDrainerCommand =
  { readonly type: 'snapshot'; readonly path: string } | { readonly type: 'gc' } | { readonly type: 'stop' };

/** Drainer → parent. */
export type MemoryDrainerMessage =
  | { readonly type: 'ready' }
  | {
      readonly type: 'sample';
      readonly at: number;
      readonly memory: NodeJS.MemoryUsage;
      /** Bytes used per V8 heap space (new, old, code, large objects, …). */
      readonly spaces: Record<string, number>;
      readonly delivered: number;
    }
  | { readonly type: 'snapshot'; readonly path: string }
  /** The heap used right after a full collection (the process runs with --expose-gc): the live set. */
  | { readonly type: 'gc'; readonly heapUsed: number }
  | { readonly type: 'stopped' };

const config = JSON.parse(process.argv[2] ?? '{}') as MemoryDrainerConfig;
const send = (message: MemoryDrainerMessage) => process.send?.(message);
const db = kysely(config.databaseUrl, 2);
let delivered = 0;
const drainer = createDrainer({
  db,
  spec: defineOutbox({ table: config.table, partitionColumn: 'resource_id' }),
  sink: createOpenFgaSink({ apiUrl: config.apiUrl, storeId: config.storeId, ...credentialsOf(config.token) }),
  listen: { connectionString: config.databaseUrl },
  onEvent: (event: DrainerEvent) => {
    if (event.type === 'delivered') delivered += event.ids.length;
  },
});
await drainer.start();
const spaces = () =>
  Object.fromEntries(getHeapSpaceStatistics().map((space) => [space.space_name, space.space_used_size]));
const sampler = setInterval(
  () => send({ type: 'sample', at: performance.now(), memory: process.memoryUsage(), spaces: spaces(), delivered }),
  1_000,
);
send({ type: 'ready' });
process.on('message', (command: MemoryDrainerCommand) => {
  if (command.type === 'snapshot') send({ type: 'snapshot', path: writeHeapSnapshot(command.path) });
  else if (command.type === 'gc') {
    (globalThis as { gc?: () => void }).gc?.();
    send({ type: 'gc', heapUsed: process.memoryUsage().heapUsed });
  } else {
    clearInterval(sampler);
    void drainer
      .stop()
      .then(() => db.destroy())
      .then(() => {
        send({ type: 'stopped' });
        process.disconnect();
      });
  }
});
