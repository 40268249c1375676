// The writing service of `pnpm bench tokens`, in a process of its own (run with `node --import
// tsx`): on each `write` it commits one intent and its token, answers with the token at once (as a
// service answers 202), then writes it through (`drainer.writeThrough`); its drainer (defaults,
// LISTEN, the OpenFGA sink) takes what the write-through leaves.
import { createDrainer } from '@outbox/drainer';
import { createOpenFgaSink } from '@outbox/openfga';
import { defineOutbox, enqueue, outboxToken } from '@outbox/outbox';
import { kysely } from './bench-db.js';
import { credentialsOf } from './openfga-credentials.js';

/** What the parent passes (one JSON argument). */
export interface TokenWriterConfig {
  readonly databaseUrl: string;
  readonly table: string;
  readonly apiUrl: string;
  readonly storeId: string;
  readonly token: string | undefined;
  /** Deliver each write from this process right after its commit. */
  readonly writeThrough: boolean;
}

/** Parent → writer. */
export type TokenWriterCommand = { readonly type: 'write'; readonly i: number } | { readonly type: 'stop' };

/** Writer → parent. `committedAt` is `performance.timeOrigin + performance.now()` at the commit's return. */
export type TokenWriterMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'written'; readonly i: number; readonly token: string; readonly committedAt: number }
  | { readonly type: 'stopped' };

const config = JSON.parse(process.argv[2] ?? '{}') as TokenWriterConfig;
const send = (message: TokenWriterMessage) => process.send?.(message);
const db = kysely(config.databaseUrl, 20);
const spec = defineOutbox({ table: config.table, partitionColumn: 'resource_id' });
const drainer = createDrainer({
  db,
  spec,
  sink: createOpenFgaSink({ apiUrl: config.apiUrl, storeId: config.storeId, ...credentialsOf(config.token) }),
  listen: { connectionString: config.databaseUrl },
});
await drainer.start();
send({ type: 'ready' });

async function write(i: number): Promise<void> {
  const object = `vpc:t${i}`;
  const { id, token } = await db.transaction().execute(async (trx) => {
    const enqueued = await enqueue(trx, spec, {
      partitionKey: object,
      payload: { writes: [{ user: 'project:bench', relation: 'project', object }] },
    });
    return { id: enqueued, token: await outboxToken(trx, spec, [enqueued]) };
  });
  send({ type: 'written', i, token, committedAt: performance.timeOrigin + performance.now() });
  if (config.writeThrough) await drainer.writeThrough([id]).catch(() => undefined);
}

process.on('message', (command: TokenWriterCommand) => {
  if (command.type === 'write') void write(command.i);
  else
    void drainer
      .stop()
      .then(() => db.destroy())
      .then(() => {
        send({ type: 'stopped' });
        process.disconnect();
      });
});
