/**
 * The exit codes of every `outbox` command (docs/cli.md "Exit codes"). Scripts and alert rules
 * branch on them, so they never change meaning.
 *
 * @example
 * if (code === EXIT.problem) page('outbox status --check: poisoned intents');
 */
export const EXIT = Object.freeze({
  /** The command did what it was asked and found nothing wrong. */
  ok: 0,
  /** The command ran and found a problem: poisoned rows (`status --check`), drift, a drain that poisoned, a failed doctor check. */
  problem: 1,
  /** Usage or configuration: an unknown flag, a bad config, a missing variable, a missing table. Nothing was changed. */
  usage: 2,
  /** A server did not answer: Postgres or OpenFGA refused the connection, its name did not resolve, or it timed out. */
  unreachable: 3,
});

/** One of {@link EXIT}'s values. */
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
