import type { AnyKysely, OutboxSpec } from '@outbox/outbox';
import type { OutboxOwner } from '@outbox/reconciler';
import type { FastifyRequest } from 'fastify';
import type { ConsoleOpenFga } from './fga.js';

/** One outbox the console shows. */
export interface ConsoleOutbox {
  /** Its name in the pages (the CLI config's key). */
  readonly name: string;
  readonly spec: OutboxSpec;
  readonly db: AnyKysely;
  /** The owner mapping: the drift page needs it (as `outbox audit` does). */
  readonly owner?: OutboxOwner;
  /** The database, password masked, to show. Default: not shown. */
  readonly database?: string;
}

/** What the console's actions change. */
export type ConsoleAction = 'redrive' | 'retire' | 'discard' | 'repair';

/** What an {@link ConsoleAuthorize} hook decides on. */
export interface ConsoleAuthorizeInput {
  /** Who asks, as the console's `actor` option identified them; undefined: nobody identified. */
  readonly actor: string | undefined;
  readonly action: ConsoleAction;
  /** The outbox's name. */
  readonly outbox: string;
  readonly request: FastifyRequest;
}

/** Decides whether an action may be done; false refuses it (403) and nothing changes. */
export type ConsoleAuthorize = (input: ConsoleAuthorizeInput) => boolean | Promise<boolean>;

/** The admin relation the default hook checks: `user:<actor> outbox_admin platform:default`. */
export const DEFAULT_ADMIN = Object.freeze({ relation: 'outbox_admin', object: 'platform:default' });

/** Options of {@link outboxConsole}. */
export interface OutboxConsoleOptions {
  readonly outboxes: readonly ConsoleOutbox[];
  /** The store the outboxes deliver to: the timeline, drift and provenance pages read it. */
  readonly openfga?: ConsoleOpenFga;
  /**
   * Who is asking. Default: the `x-user-id` header, as the example services read it — set it only
   * behind a proxy that authenticates (the console trusts it).
   */
  readonly actor?: (request: FastifyRequest) => string | undefined;
  /** Actions: none unless `enabled` (read-only by default). */
  readonly actions?: {
    readonly enabled: boolean;
    /**
     * Default: an OpenFGA Check of `user:<actor>` on {@link DEFAULT_ADMIN} (an actor with a type
     * prefix, `user:x`, is checked as is); refused without an actor or without `openfga`.
     */
    readonly authorize?: ConsoleAuthorize;
    /** The relation and object the default hook checks. */
    readonly admin?: { readonly relation: string; readonly object: string };
    /** The most tuple deletes one repair may enqueue (as `outbox repair --max-deletes`). Default 100. */
    readonly maxDeletes?: number;
  };
}
