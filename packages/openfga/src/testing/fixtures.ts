import type { ClientWriteRequest, OpenFgaClient } from '@openfga/sdk';
import {
  createDrainer,
  type DrainerConfig,
  type DrainResult,
  type Intent,
  type Logger,
  type Outcome,
  type Sink,
  type SinkContext,
} from '@outbox/drainer';
import {
  createOutboxTable,
  defineOutbox,
  enqueueMany,
  REGISTER_OUTBOX_PARTITION,
  type EnqueueInput,
  type IntentPayload,
  type OutboxSpec,
} from '@outbox/outbox';
import { openFgaClientConfig, type TestDatabase, type TestStore } from '@outbox/test-stack';
import { tupleKey } from '@outbox/test-stack/openfga';
import { sql } from 'kysely';
import { createOpenFgaSink, type OpenFgaSinkOptions } from '../openfga-sink.js';
import type { OpenFgaWriteClient, WriteOptions } from '../write-request.js';

// Test-only helpers of this package (not exported from it); the OpenFGA ones other packages can
// use live in @outbox/test-stack/openfga.

let nextId = 0;

/** An intent as the drainer hands it over, with an increasing id. */
export function intent(partitionKey: string, payload: IntentPayload): Intent {
  nextId += 1;
  return { id: String(nextId), partitionKey, payload, attemptCount: 0 };
}

/** A payload writing each `'user relation object'`. */
export const writes = (...keys: string[]): IntentPayload => ({ writes: keys.map(tupleKey) });

/** A payload deleting each `'user relation object'`. */
export const deletes = (...keys: string[]): IntentPayload => ({ deletes: keys.map(tupleKey) });

/** A context whose signal never aborts. */
export const noDeadline = (): SinkContext => ({ signal: new AbortController().signal });

export const kinds = (outcomes: readonly Outcome[]) => outcomes.map((o) => o.kind);

/** A sink on the test file's store and model (through the stack's credentials, if any). */
export const sinkOn = (fga: TestStore, options: OpenFgaSinkOptions = {}) =>
  createOpenFgaSink({
    ...openFgaClientConfig(fga.storeId, fga.authorizationModelId),
    storeId: fga.storeId,
    ...options,
  });

/** Wraps a real client and records every Write body it passes on (the server still gets them all). */
export function recordingClient(client: OpenFgaClient): { client: OpenFgaWriteClient; bodies: ClientWriteRequest[] } {
  const bodies: ClientWriteRequest[] = [];
  return {
    bodies,
    client: {
      write: (body: ClientWriteRequest, options?: WriteOptions) => {
        bodies.push(body);
        return client.write(body, options);
      },
    },
  };
}

/** Tuple-key ids of every operation in a Write body. */
export function bodyKeys(body: ClientWriteRequest): string[] {
  return [...(body.writes ?? []), ...(body.deletes ?? [])].map((k) => `${k.user} ${k.relation} ${k.object}`);
}

export const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Register-outbox tables in the test file's database, for tests through the real drainer. */
export function outboxTables(t: TestDatabase) {
  let tables = 0;
  return {
    async fresh(): Promise<OutboxSpec> {
      tables += 1;
      const spec = defineOutbox({
        table: `fga_sink.outbox_${tables}`,
        partitionColumn: REGISTER_OUTBOX_PARTITION,
        maxAttempts: 10,
      });
      await createOutboxTable(t.db, spec);
      return spec;
    },
    enqueue(spec: OutboxSpec, intents: readonly EnqueueInput[]): Promise<string[]> {
      return t.db.transaction().execute((trx) => enqueueMany(trx, spec, intents));
    },
    async rows(spec: OutboxSpec) {
      const result = await sql<{
        id: string;
        resource_id: string;
        sent: boolean;
        attempt_count: number;
        last_error: string | null;
        poison_cause: string | null;
        poison_code: string | null;
      }>`
        select t.id::text as id, resource_id, sent_at is not null as sent, attempt_count, last_error, poison_cause, poison_code
        from ${sql.raw(`"${spec.schema}"."${spec.tableName}"`)} t order by t.id`.execute(t.db);
      return result.rows;
    },
  };
}

/** One `drainOnce` of a quiet drainer, stopped afterwards. */
export async function drainOnce(
  t: TestDatabase,
  spec: OutboxSpec,
  sink: Sink,
  config: Partial<DrainerConfig> = {},
): Promise<DrainResult> {
  const drainer = createDrainer({ db: t.db, spec, sink, logger: quiet, ...config });
  try {
    return await drainer.drainOnce();
  } finally {
    await drainer.stop();
  }
}
