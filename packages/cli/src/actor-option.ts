import { userInfo } from 'node:os';
import {
  OutboxConfigError,
  traceOutboxAction,
  validateOutboxAction,
  type OutboxAction,
  type OutboxActionTrace,
  type OutboxSpec,
} from '@outbox/outbox';
import type { Command } from 'commander';
import { CliError } from './cli-error.js';
import type { CliIo } from './cli-io.js';
import { EXIT } from './exit-codes.js';

/** The option {@link addActorOption} adds. */
export interface ActorOptions {
  readonly actor?: string;
}

/** Adds `--actor NAME` to a command that changes the ledger (redrive, retire, discard, repair, compact). */
export function addActorOption(command: Command): Command {
  return command.option('--actor <name>', 'who is acting, as the actions log records it (default: the OS user)');
}

/** The OS user's name; `$USER` where the system has no entry for this uid (a container's), else undefined. */
function osUser(io: CliIo): string | undefined {
  try {
    return userInfo().username;
  } catch {
    return io.env.USER || io.env.LOGNAME || undefined;
  }
}

/**
 * Checks who acts before the command changes anything — a bad `--actor` (empty, control
 * characters), or no OS user to default to, is exit 2 — and returns each outbox's trace for the
 * reconciler's `record` option: every change the command makes is one row of that outbox's
 * actions log (docs/cli.md). A dry run records nothing: its traces are undefined (an explicit
 * `--actor` is still checked).
 */
export function actionTraces(
  options: ActorOptions,
  io: CliIo,
  action: OutboxAction,
  run: { readonly reason?: string; readonly dryRun?: boolean } = {},
): (spec: OutboxSpec) => OutboxActionTrace | undefined {
  const actor = options.actor ?? (run.dryRun ? undefined : osUser(io));
  if (actor === undefined) {
    if (run.dryRun) return () => undefined;
    throw new CliError('no OS user name to record as the actor of this change', 'pass --actor NAME', EXIT.usage);
  }
  try {
    validateOutboxAction({ actor, action, ...(run.reason !== undefined ? { reason: run.reason } : {}) });
  } catch (error) {
    if (!(error instanceof OutboxConfigError)) throw error;
    const what = error.field === 'actor' ? (options.actor === undefined ? 'the OS user name' : '--actor') : error.field;
    throw new CliError(
      `${what}: ${error.message.slice(error.field.length + 2)}`,
      error.field === 'actor' ? 'the actions log records who acted: pass --actor NAME' : undefined,
      EXIT.usage,
      { cause: error },
    );
  }
  if (run.dryRun) return () => undefined;
  return (spec) =>
    traceOutboxAction(spec, { actor, action, ...(run.reason !== undefined ? { reason: run.reason } : {}) });
}
