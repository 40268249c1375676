import type { Reconciler, RedriveResult } from '@outbox/reconciler';
import { CliError } from './cli-error.js';
import { EXIT } from './exit-codes.js';

/**
 * What `redrive --dry-run` needs from @outbox/reconciler: `planRedrive()`, a pass that takes the
 * same locks and makes the same decisions as `redrivePoisoned()`, returns the same result, and
 * changes no row (docs/cli.md "What redrive --dry-run needs"). Checked for, never guessed at: an
 * older reconciler would revive rows if it were simply called with a flag it ignores.
 */
export interface RedrivePlanner {
  planRedrive(): Promise<RedriveResult>;
}

/** The reconciler's dry run, or a usage error (exit 2) when the installed reconciler has none. */
export function redrivePlanner(reconciler: Reconciler): RedrivePlanner {
  const candidate = reconciler as Reconciler & Partial<RedrivePlanner>;
  if (typeof candidate.planRedrive !== 'function') {
    throw new CliError('redrive --dry-run needs a dry-run mode the installed @outbox/reconciler does not have (planRedrive)', 'run `redrive` without --dry-run, or upgrade @outbox/reconciler', EXIT.usage);
  }
  return { planRedrive: () => (candidate.planRedrive as RedrivePlanner['planRedrive']).call(reconciler) };
}
