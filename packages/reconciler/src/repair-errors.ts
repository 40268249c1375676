/**
 * `repairOutbox` refused: its corrections would delete more than `maxDeletes` tuples. `enqueued`
 * lists intents committed before (a change since the plan added deletions); empty at planning.
 *
 * @example
 * if (error instanceof RepairBudgetError) console.error(error.deletes, error.maxDeletes);
 */
export class RepairBudgetError extends Error {
  override readonly name = 'RepairBudgetError';
  /** The outbox table. */
  readonly table: string;
  /** The deletes the corrections need (as far as they were counted). */
  readonly deletes: number;
  readonly maxDeletes: number;
  /** The partitions those deletes are in. */
  readonly partitions: number;
  /** Ids of intents committed before the budget was found exceeded (empty when refused at planning). */
  readonly enqueued: readonly string[];
  constructor(
    table: string,
    details: { deletes: number; maxDeletes: number; partitions: number; enqueued: readonly string[] },
  ) {
    super(
      `repair of ${table} would delete ${details.deletes} tuples in ${details.partitions} partition(s), more than maxDeletes ${details.maxDeletes}: ` +
        (details.enqueued.length === 0
          ? 'nothing was enqueued. '
          : `stopped after enqueuing ${details.enqueued.length} intent(s). `) +
        'Deleting revokes access: look at the dry run first (an audit against the wrong store, or an owner database restored from an ' +
        `old backup, reads as mass drift). If the deletions are right, run again with maxDeletes: ${details.deletes} or more.`,
    );
    this.table = table;
    this.deletes = details.deletes;
    this.maxDeletes = details.maxDeletes;
    this.partitions = details.partitions;
    this.enqueued = details.enqueued;
  }
}
