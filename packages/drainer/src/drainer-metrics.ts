import { ValueType, type Attributes } from '@opentelemetry/api';
import type { MeterOptions } from '@outbox/outbox';
import { OUTBOX_TABLE_ATTRIBUTE, resolveMeter, startAtZero } from '@outbox/outbox/protocol';
import manifest from '../package.json' with { type: 'json' };
import type { DrainerEvent } from './events.js';

/** Seconds: from a claim's fraction of a millisecond to a sink call at its 30 s deadline. */
const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Seconds: from a flush on write (milliseconds) to an intent that waited out an outage (hours). */
const LAG_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600];
/** Intents: a batch holds 1 to 1000 (`batchSize`). */
const BATCH_SIZE_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000];

/**
 * The drainer's instruments (docs/metrics.md), recorded from its own events: what `onEvent` sees is
 * what the metrics count. Returns the recorder the drainer of `table` calls with each event.
 */
export function drainerMetrics(options: MeterOptions, table: string): (event: DrainerEvent) => void {
  const meter = resolveMeter(options, { name: manifest.name, version: manifest.version });
  const count = (name: string, unit: string, description: string) =>
    meter.createCounter(name, { unit, description, valueType: ValueType.INT });
  const delivered = count('outbox.drainer.delivered', '{intent}', 'Intents OpenFGA accepted.');
  const retried = count(
    'outbox.drainer.retried',
    '{intent}',
    'Intents that failed transiently and will be retried after a backoff.',
  );
  const poisoned = count(
    'outbox.drainer.poisoned',
    '{intent}',
    'Intents poisoned: refused for good, or out of attempts.',
  );
  const passFailures = count(
    'outbox.drainer.pass.failures',
    '{pass}',
    'Drain passes that failed (a database error, a table that does not verify) or that the sink halted (credentials refused).',
  );
  const seconds = (name: string, description: string, buckets = DURATION_BUCKETS) =>
    meter.createHistogram(name, {
      unit: 's',
      description,
      valueType: ValueType.DOUBLE,
      advice: { explicitBucketBoundaries: buckets },
    });
  const claimDuration = seconds('outbox.drainer.claim.duration', 'How long one claim took (the claim function call).');
  const deliveryDuration = seconds(
    'outbox.drainer.delivery.duration',
    'How long the sink took to deliver a batch in which at least one intent was delivered.',
  );
  const deliveryLag = seconds(
    'outbox.drainer.delivery.lag',
    "Per delivered intent, from its created_at (the enqueueing transaction's now(): its start, not its commit) to the commit that recorded it delivered.",
    LAG_BUCKETS,
  );
  const batchSize = meter.createHistogram('outbox.drainer.batch.size', {
    unit: '{intent}',
    description: 'Intents per claimed batch.',
    valueType: ValueType.INT,
    advice: { explicitBucketBoundaries: BATCH_SIZE_BUCKETS },
  });

  // Only once a LISTEN connection was tried: a drainer without one reports nothing here.
  let listening: number | undefined;
  meter
    .createObservableGauge('outbox.drainer.listening', {
      unit: '1',
      description: 'Whether the LISTEN connection is up (1), or lost while the timer alone delivers (0).',
      valueType: ValueType.INT,
    })
    .addCallback((result) => {
      if (listening !== undefined) result.observe(listening, { [OUTBOX_TABLE_ATTRIBUTE]: table });
    });

  startAtZero(() => {
    const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: table };
    for (const counter of [delivered, retried, poisoned]) counter.add(0, attributes);
    for (const halted of [false, true]) passFailures.add(0, { ...attributes, 'outbox.pass.halted': halted });
  });

  return (event) => {
    const attributes: Attributes = { [OUTBOX_TABLE_ATTRIBUTE]: event.table };
    switch (event.type) {
      case 'batch-claimed':
        batchSize.record(event.count, attributes);
        claimDuration.record(event.claimMs / 1_000, attributes);
        return;
      case 'delivered':
        delivered.add(event.ids.length, attributes);
        deliveryDuration.record(event.deliverMs / 1_000, attributes);
        for (const lagMs of event.lagMs) deliveryLag.record(lagMs / 1_000, attributes);
        return;
      case 'retried':
        retried.add(event.ids.length, attributes);
        return;
      case 'poisoned':
        poisoned.add(event.ids.length, attributes);
        return;
      case 'pass-failed':
        passFailures.add(1, { ...attributes, 'outbox.pass.halted': event.halted });
        return;
      case 'listen-changed':
        listening = event.state === 'off' ? undefined : event.state === 'listening' ? 1 : 0;
        return;
    }
  };
}
