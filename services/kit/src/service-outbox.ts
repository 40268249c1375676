import type { MeterProvider } from '@opentelemetry/api';
import {
  createDrainer,
  DrainerStoppedError,
  type BackoffOptions,
  FlushPoisonedError,
  FlushTimeoutError,
  type Drainer,
  type DrainResult,
  type Logger,
} from '@outbox/drainer';
import { createOpenFgaSink, createOpenFgaTupleReader } from '@outbox/openfga';
import { outboxStats, outboxToken, type OutboxSpec, type OutboxStats, type AnyKysely } from '@outbox/outbox';
import {
  createContinuousAudit,
  createReconciler,
  type AuditReport,
  type OutboxOwner,
  type Reconciler,
  type ReconcilerMetrics,
  type RedriveResult,
} from '@outbox/reconciler';
import { openFgaClient, type OpenFgaConnection } from './authorizer.js';

/** What became of a write's intent by the time the service answers, with the token that names it. */
export type Delivery = {
  /** The write's consistency token (`Outbox-Token`), when the intent ids were given to `settle`. */
  readonly token?: string;
} & (
  | { readonly status: 'delivered' }
  /** Committed and not (yet) in OpenFGA: the drainer delivers it on its schedule. `note` says why it is pending. */
  | { readonly status: 'pending'; readonly note: string }
);

/** One service's outbox at run time: its drainer, its reconciler and what a route needs of them. */
export interface ServiceOutbox {
  readonly spec: OutboxSpec;
  /** Delivers on its timer and LISTEN; checks deliveries at risk of a late write (docs/agreement.md). */
  readonly drainer: Drainer;
  /** Redrives on its timer; its `start` and `stop` also run the incremental audit's timer (with an owner). */
  readonly reconciler: Reconciler;
  /**
   * One audit now, as the timer runs it (`createContinuousAudit`): the incremental audit, drift
   * logged at WARN and repaired through the outbox within the delete budget (unless `repair` is
   * off). Undefined without an owner mapping.
   */
  audit(): Promise<AuditReport | undefined>;
  /**
   * After a commit that enqueued into `partitionKey`: waits for delivery when flush-on-write is on
   * (read-your-writes), and reports `pending` instead of failing when it does not finish. `ids`
   * (what enqueue returned) makes it wait for those intents without looking the partition up, and
   * gives the answer its consistency token.
   */
  settle(partitionKey: string, ids?: readonly string[]): Promise<Delivery>;
  /** Counts of the outbox by state (pending, deliverable, poisoned, superseded, retired). */
  stats(): Promise<OutboxStats>;
  /** Redrive now, refused intents included (after a model change, or an operator's request), as many passes as keep reviving; then a drain pass. */
  redrive(): Promise<RedriveResult>;
  /** One drain pass now. */
  drainOnce(): Promise<DrainResult>;
}

/** What {@link createServiceOutbox} takes. */
export interface ServiceOutboxConfig {
  readonly db: AnyKysely;
  readonly spec: OutboxSpec;
  readonly openfga: OpenFgaConnection;
  /** Wake the drainer with LISTEN on this Postgres URL (a dedicated connection). Omit: timer only. */
  readonly listenUrl?: string;
  readonly drainIntervalMs: number;
  readonly redriveIntervalMs: number;
  /** Compaction on the reconciler's timer (docs/ledger.md). Default hourly, 30 days kept; 0 ms: off. */
  readonly compaction?: { readonly intervalMs: number; readonly retentionMs: number };
  readonly flushOnWrite: boolean;
  readonly flushTimeoutMs: number;
  /**
   * After a write's commit, deliver its intents from this process at once (`drainer.writeThrough`),
   * whether or not the answer waits for them. Default true; the kit turns it off with `runDrainer: false`
   * (delivery is then another process's).
   */
  readonly writeThrough?: boolean;
  /** Retry spacing of the drainer (its defaults when empty). */
  readonly retryBackoff: BackoffOptions;
  /**
   * What the service's own rows expect in OpenFGA (`registerServiceOwner(definition)`, iam's
   * `iamOwner`), for the audit. Default none: no audit runs.
   */
  readonly owner?: OutboxOwner;
  /** Milliseconds between incremental audits, with `owner`. Default 300000 (see `ServiceOptions`); 0: none. */
  readonly auditIntervalMs?: number;
  /**
   * What each audit repairs: the drift it found, deleting at most `maxDeletes` tuples (past it:
   * nothing, an ERROR and `outbox.repair.refused`). Default `{ maxDeletes: 100 }`; false:
   * detection only. See `ServiceOptions.repairDrift` for the bound T it gives.
   */
  readonly repair?: false | { readonly maxDeletes: number };
  readonly logger: Logger;
  /** Where the drainer's and the reconciler's instruments go (docs/metrics.md). Default: the global provider. */
  readonly meterProvider?: MeterProvider;
  /** Told of every audit's report, for the drift metrics (docs/metrics.md). Default none. */
  readonly reconcilerMetrics?: ReconcilerMetrics;
}

/** Incremental audits every `intervalMs`, one at a time, from `start` to `stop`; a failed one is logged and the next runs on time. */
function auditTimer(run: () => Promise<unknown>, intervalMs: number, logger: Logger, onStart: () => void) {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let started = false;
  const tick = () => {
    timer = setTimeout(() => {
      running = run()
        .catch((error: unknown) =>
          logger.warn(`audit failed; the next runs in ${intervalMs} ms`, {
            error: error instanceof Error ? error.message : String(error),
          }),
        )
        .finally(() => {
          running = undefined;
          if (started) tick();
        });
    }, intervalMs);
  };
  return {
    start() {
      if (started || intervalMs === 0) return;
      started = true;
      onStart();
      tick();
    },
    async stop() {
      started = false;
      clearTimeout(timer);
      await running;
    },
  };
}

function pendingNote(error: unknown): string {
  if (error instanceof FlushTimeoutError)
    return `not delivered to OpenFGA within the flush timeout; the drainer keeps trying (${error.message})`;
  if (error instanceof FlushPoisonedError) {
    return `OpenFGA refused the intent (${error.lastError ?? 'no error recorded'}); it is poisoned and waits for the reconciler`;
  }
  if (error instanceof DrainerStoppedError)
    return 'the service is stopping; the intent is committed and will be delivered by the next drainer';
  return `delivery failed for now (${error instanceof Error ? error.message : String(error)}); the drainer retries`;
}

/**
 * Wires a service's outbox: an OpenFGA sink, a drainer on it (timer + LISTEN, started by the
 * caller) and a reconciler (timer, started by the caller). Every piece takes the one spec.
 */
export function createServiceOutbox(config: ServiceOutboxConfig): ServiceOutbox {
  const { db, spec, logger } = config;
  const sink = createOpenFgaSink({
    apiUrl: config.openfga.apiUrl,
    storeId: config.openfga.storeId,
    ...(config.openfga.authorizationModelId ? { authorizationModelId: config.openfga.authorizationModelId } : {}),
    ...(config.openfga.credentials ? { credentials: config.openfga.credentials } : {}),
  });
  const drainer = createDrainer({
    db,
    spec,
    sink,
    intervalMs: config.drainIntervalMs,
    backoff: config.retryBackoff,
    listen: config.listenUrl ? { connectionString: config.listenUrl } : false,
    logger,
    ...(config.meterProvider ? { meterProvider: config.meterProvider } : {}),
  });
  const compaction = config.compaction ?? { intervalMs: 3_600_000, retentionMs: 30 * 86_400_000 };
  // Without a pinned model the store's latest is in force: a new one asks refused intents to retry.
  const fga = config.openfga.authorizationModelId ? undefined : openFgaClient(config.openfga);
  const redriver = createReconciler({
    db,
    spec,
    logger,
    intervalMs: config.redriveIntervalMs,
    ...(fga ? { modelId: async () => (await fga.readLatestAuthorizationModel()).authorization_model?.id } : {}),
    compaction: compaction.intervalMs > 0 && { intervalMs: compaction.intervalMs, retentionMs: compaction.retentionMs },
    ...(config.meterProvider ? { meterProvider: config.meterProvider } : {}),
  });
  const { owner } = config;
  // Not an error of the write: the intents are committed, and the drainer's passes deliver them.
  const writeThroughFailed = (error: unknown): undefined => {
    logger.warn('write-through failed; the drainer delivers the intents', {
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  };
  const reader = createOpenFgaTupleReader({
    apiUrl: config.openfga.apiUrl,
    storeId: config.openfga.storeId,
    ...(config.openfga.credentials ? { credentials: config.openfga.credentials } : {}),
  });
  // Drift at WARN (the audit logs it), a clean run at INFO; each repair at WARN, a refused one at ERROR.
  const repair = config.repair ?? { maxDeletes: 100 };
  const continuous = owner
    ? createContinuousAudit({
        db,
        spec,
        owner,
        reader,
        logger,
        repair,
        ...(config.reconcilerMetrics ? { metrics: config.reconcilerMetrics } : {}),
      })
    : undefined;
  // The corrections' insert NOTIFYs a listening drainer; one without LISTEN takes them on its timer.
  const audit = async () => (continuous ? (await continuous.run()).report : undefined);
  const auditIntervalMs = owner ? (config.auditIntervalMs ?? 300_000) : 0;
  // T, from the settings: what the operator can count on (docs/agreement.md, "The bound T").
  const boundMs = auditIntervalMs + config.drainIntervalMs;
  const audits = auditTimer(audit, auditIntervalMs, logger, () =>
    logger.info(
      repair
        ? `audit every ${auditIntervalMs} ms, repairing drift through the outbox (at most ${repair.maxDeletes} deletes a run): a partition with nothing pending agrees with the owner within T = ${boundMs} ms + two audit runs and a delivery`
        : `audit every ${auditIntervalMs} ms, detection only: drift is logged, not repaired`,
      {
        outbox: spec.table,
        auditIntervalMs,
        repairDrift: repair !== false,
        drainIntervalMs: config.drainIntervalMs,
        ...(repair ? { repairMaxDeletes: repair.maxDeletes } : {}),
      },
    ),
  );
  const reconciler: Reconciler = {
    ...redriver,
    async start() {
      await redriver.start();
      audits.start();
    },
    async stop() {
      await Promise.all([redriver.stop(), audits.stop()]);
    },
  };
  return {
    spec,
    drainer,
    reconciler,
    audit,
    async settle(partitionKey, ids) {
      const own = ids && ids.length > 0 ? ids : undefined;
      // The write-through: this process delivers its own heads now; what it leaves, the drainer does.
      const through =
        own && config.writeThrough !== false
          ? drainer.writeThrough(own).catch((error: unknown) => writeThroughFailed(error))
          : undefined;
      const token = own ? { token: await outboxToken(db, spec, own) } : {};
      if (!config.flushOnWrite) {
        return {
          status: 'pending',
          note: through
            ? 'flush on write is off: the intent is being delivered, and the answer does not wait for it'
            : 'flush on write is off: the drainer delivers the intent on its schedule',
          ...token,
        };
      }
      try {
        if ((await through)?.deferred.length === 0) return { status: 'delivered', ...token };
        await drainer.flush({ partitionKey, ...(ids ? { ids } : {}), timeoutMs: config.flushTimeoutMs });
        return { status: 'delivered', ...token };
      } catch (error) {
        logger.warn(`write committed, delivery pending for ${partitionKey}`, {
          error: error instanceof Error ? error.message : String(error),
        });
        return { status: 'pending', note: pendingNote(error), ...token };
      }
    },
    stats: () => outboxStats(db, spec),
    async redrive() {
      // A pass handles one batch of poisoned rows; after a model change every one of them should be
      // tried, so go on while passes still revive something and report more revivable rows (a
      // deferred partition also says `more`: the revive guard keeps that from spinning).
      let result = await reconciler.redrivePoisoned({ refused: true, reason: 'model-change' });
      const revived = [...result.revived];
      for (let pass = 1; pass < 100 && result.more && result.revived.length > 0; pass += 1) {
        result = await reconciler.redrivePoisoned();
        revived.push(...result.revived);
      }
      // Revival is an UPDATE: no NOTIFY fires, so ask for a pass rather than wait for the timer.
      if (revived.length > 0) drainer.kick();
      return { ...result, revived };
    },
    drainOnce: () => drainer.drainOnce(),
  };
}
