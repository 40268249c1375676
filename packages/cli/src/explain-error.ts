import { OutboxConfigError, OutboxTableError } from '@outbox/outbox';
import { SQLSTATE, sqlState } from '@outbox/outbox/protocol';
import { DiscardRefusedError, RepairBudgetError, RetireRefusedError } from '@outbox/reconciler';
import { CliError } from './cli-error.js';
import { EXIT } from './exit-codes.js';

/** Node's codes for a server that cannot be reached: refused, no route, no such name, too slow. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
]);
/** How pg words a connection that timed out or dropped (it sets no code). */
const NETWORK_MESSAGES =
  /timeout expired|connection timeout|Connection terminated unexpectedly|terminating connection due to administrator command/i;
/** SQLSTATEs of a login or database the config names wrongly. */
const LOGIN_STATES = new Set(['28P01', '28000', '3D000']);
/** The server is starting or shutting down: as good as unreachable. */
const UNAVAILABLE_STATES = new Set(['57P03', SQLSTATE.ADMIN_SHUTDOWN]);

/** The error and every error it wraps (`cause`, an AggregateError's `errors`). */
function* chain(error: unknown, depth = 0): Generator<unknown> {
  if (error === null || error === undefined || depth > 8) return;
  yield error;
  const e = error as { cause?: unknown; errors?: unknown };
  if (Array.isArray(e.errors)) for (const inner of e.errors) yield* chain(inner, depth + 1);
  yield* chain(e.cause, depth + 1);
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
const codeOf = (error: unknown) => (error as { code?: unknown } | null)?.code;

/** True when `error` (or what it wraps) says a server did not answer. */
export function isUnreachable(error: unknown): boolean {
  for (const e of chain(error)) {
    const code = codeOf(e);
    if (typeof code === 'string' && (NETWORK_CODES.has(code) || UNAVAILABLE_STATES.has(code))) return true;
    const name = (e as { name?: unknown }).name;
    // The OpenFGA SDK wraps a refused or reset connection in a bare FgaError; the tuple reader's
    // error without a status is a request that got no answer.
    if (name === 'FgaError') return true;
    if (name === 'OpenFgaReadError' && (e as { status?: unknown }).status === undefined) return true;
    if (e instanceof Error && NETWORK_MESSAGES.test(e.message)) return true;
  }
  return false;
}

/** The network reason in `error`, shortest first: `connect ECONNREFUSED 127.0.0.1:5432`. */
export function networkReason(error: unknown): string {
  for (const e of chain(error)) {
    const code = codeOf(e);
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return messageOf(e) || code;
  }
  return messageOf(error);
}

/** One line for the missing pieces of an OutboxTableError (its message is a list). */
function tableLine(error: OutboxTableError): string {
  return `${error.table} does not match the outbox contract: ${error.missing.join('; ')}`;
}

/**
 * Turns whatever a command threw into the {@link CliError} that is printed: expected failures get
 * their exit code and a hint; anything else is exit 1 marked unexpected (its stack is printed only
 * with OUTBOX_DEBUG=1).
 */
export function explainError(error: unknown): CliError {
  if (error instanceof CliError) return error;
  if (error instanceof OutboxConfigError) return new CliError(error.message, undefined, EXIT.usage, { cause: error });
  if (error instanceof OutboxTableError)
    return new CliError(tableLine(error), 'run the migrations, or point the config at the right table', EXIT.usage, {
      cause: error,
    });
  if (error instanceof RetireRefusedError) {
    const refused = error.refused.map((r) => `${r.id} ${r.refusal}`).join(', ');
    return new CliError(
      `retire on ${error.table} changed nothing: not superseded: ${refused}`,
      'retire only what `outbox redrive` reports superseded',
      EXIT.problem,
      { cause: error },
    );
  }
  if (error instanceof DiscardRefusedError) {
    const refused = error.refused.map((r) => `${r.id} ${r.refusal}`).join(', ');
    const has = (refusal: string) => error.refused.some((r) => r.refusal === refusal);
    const hint = [
      'discard only poisoned rows no delivered successor covers',
      ...(has('superseded') ? ['retire the superseded ones'] : []),
      ...(has('in-flight') ? ['retry the in-flight ones in a moment: a drainer holds their partition'] : []),
    ].join('; ');
    return new CliError(`discard on ${error.table} changed nothing: not discardable: ${refused}`, hint, EXIT.problem, {
      cause: error,
    });
  }
  if (error instanceof RepairBudgetError) {
    return new CliError(
      `repair of ${error.table} would delete ${error.deletes} tuples, more than --max-deletes ${error.maxDeletes}; ${error.enqueued.length === 0 ? 'nothing was enqueued' : `stopped after enqueuing ${error.enqueued.length} intent(s)`}`,
      `read the dry run first; if the deletions are right, pass --max-deletes ${error.deletes}`,
      EXIT.problem,
      { cause: error },
    );
  }
  const state = sqlState(error);
  if (state === SQLSTATE.UNDEFINED_TABLE)
    return new CliError(messageOf(error), 'run the migrations (`outbox doctor` checks the tables)', EXIT.usage, {
      cause: error,
    });
  if (state !== undefined && LOGIN_STATES.has(state))
    return new CliError(`Postgres refused: ${messageOf(error)}`, 'check the database URL in the config', EXIT.usage, {
      cause: error,
    });
  if (isUnreachable(error))
    return new CliError(
      `a server did not answer: ${networkReason(error)}`,
      'is it running, and is the address right?',
      EXIT.unreachable,
      { cause: error },
    );
  return new CliError(`unexpected error: ${messageOf(error)}`, 'set OUTBOX_DEBUG=1 for the stack', EXIT.problem, {
    cause: error,
  });
}
