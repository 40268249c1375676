import type { ChaosResult } from './chaos-run.js';

const n = (value: number) => value.toLocaleString('en-US');
const mark = (ok: boolean) => (ok ? '✓' : '✗');

/**
 * The result as the table `pnpm chaos` prints: figures first, then one line per check, then the
 * drifted samples with their ledgers.
 *
 * @example
 * console.log(formatChaosReport(result));
 */
export function formatChaosReport(r: ChaosResult): string {
  const { intents, order, drift } = r.checks;
  const f = r.faults;
  const w = r.workload;
  const d = r.drainers;
  const outcomes =
    Object.entries(f.lateWriteOutcomes)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const orderViolations = order.sentAtBackwards.length + order.deliveredPastDeliverable.length;
  const failed = [
    intents.lost > 0 && 'lost intents',
    orderViolations > 0 && 'order',
    drift.objectsDrifted > 0 && 'drift',
    d.overlappingRequests > 0 && 'overlapping requests',
  ].filter(Boolean);
  const lines = [
    `chaos run: seed ${r.seed}${r.short ? ', --short' : ''}; ${r.seconds.faults.toFixed(1)} s of faults, drained in ${r.seconds.drain.toFixed(1)} s, settled ${r.seconds.settle} s, ${r.seconds.total.toFixed(1)} s in all`,
    '',
    `workload     ${n(w.intents)} intents over ${n(w.partitions)} partitions: ${n(w.registers)} registers, ${n(w.deregisters)} deregisters, ${n(w.bad)} bad (own partitions); ${w.resting} partitions left alone after a provocation; ${w.failedTransactions} failed transactions`,
    `faults       drainer kills ${f.kills} · terminations ${f.terminations} (${f.backendsTerminated} backends) · OpenFGA restarts ${f.openfgaRestarts} (${f.openfgaRestartsOnNewPort} on a new port) · slow answers ${f.slowAnswers}`,
    `late writes  ${f.lateWrites} provoked of ${f.lateWriteAttempts} attempts (${outcomes}); ${f.lateWriteObjects} objects named, ${f.lateWriteObjectsOvertaken} delivered by another drainer during the hold`,
    `drainers     ${d.starts} starts, ${d.unexpectedExits} unexpected exits; reported ${n(d.delivered)} delivered, ${n(d.retried)} retried, ${n(d.poisoned)} poisoned, ${d.failedPasses} failed passes`,
    `redrive      ${r.redrive.passes} pass(es), ${r.redrive.revived} revived, ${r.redrive.superseded} superseded`,
    '',
    `lost intents       ${String(intents.lost).padStart(5)}  ${mark(intents.lost === 0)}  (${n(intents.delivered)} delivered; ${intents.badPoisoned}/${w.bad} bad poisoned; undelivered ${intents.undelivered.length}, bad not poisoned ${intents.badNotPoisoned.length}, missing ${intents.missing.length})`,
    `order violations   ${String(orderViolations).padStart(5)}  ${mark(orderViolations === 0)}  (sent_at backwards ${order.sentAtBackwards.length}, delivered past a deliverable row ${order.deliveredPastDeliverable.length}; ${order.samples} samples)`,
    `overlapping        ${String(d.overlappingRequests).padStart(5)}  ${mark(d.overlappingRequests === 0)}  (requests a drainer sent for a partition while one of its own was still in flight)`,
    `drift              ${String(drift.objectsDrifted).padStart(5)}  ${mark(drift.objectsDrifted === 0)}  (objects; ${drift.unexpected} unexpected and ${drift.missing} missing tuples, of ${n(drift.objects)} objects; ${drift.objectsDriftedUnexplained.length} not named by a late write)`,
  ];
  for (const s of r.checks.drift.samples) {
    lines.push(
      `  ${s.object} (row ${s.rowPresent ? 'present' : 'absent'}): ${[...s.unexpected.map((t) => `+ ${t}`), ...s.missing.map((t) => `- ${t}`)].join('; ')}`,
    );
    lines.push(`    ledger: ${s.ledger.join(' · ')}`);
  }
  if (drift.objectsDriftedUnexplained.length > 0)
    lines.push(`  drifted without a late write: ${drift.objectsDriftedUnexplained.slice(0, 10).join(', ')}`);
  for (const [what, ids] of [
    ['undelivered', intents.undelivered],
    ['bad not poisoned', intents.badNotPoisoned],
    ['missing', intents.missing],
  ] as const) {
    if (ids.length > 0) lines.push(`  ${what}: #${ids.slice(0, 10).join(', #')}${ids.length > 10 ? ', …' : ''}`);
  }
  for (const [what, keys] of [
    ['sent_at backwards', order.sentAtBackwards],
    ['delivered past a deliverable row', order.deliveredPastDeliverable],
  ] as const) {
    if (keys.length > 0) lines.push(`  ${what}: ${keys.slice(0, 10).join(', ')}${keys.length > 10 ? ', …' : ''}`);
  }
  lines.push('', r.passed ? 'result: PASS' : `result: FAIL (${failed.join(', ')})`);
  return lines.join('\n');
}
