/**
 * `pnpm model` (the test's exploration) and `pnpm model:long` (`--long`): the model's three runs
 * without the test stack, with quint's output and a verdict each. Exits 1 when the protocol breaks
 * an invariant, the mutant does not, or a replay fails.
 */
import {
  INVARIANTS,
  LONG_EXPLORATION,
  MUTANT_BREAKS,
  MUTANT_MODULE,
  PROTOCOL_MODULE,
  REPLAYS,
  TEST_EXPLORATION,
  passedReplays,
  replay,
  simulate,
  verdict,
  type QuintResult,
} from './quint.js';

/** No limit worth the name: a long run is meant to take long. */
const TIMEOUT_MS = 6 * 60 * 60 * 1000;

const exploration = process.argv.includes('--long') ? LONG_EXPLORATION : TEST_EXPLORATION;
const runs: ReadonlyArray<{ name: string; result: Promise<QuintResult>; good: (r: QuintResult) => boolean }> = [
  {
    name: `${PROTOCOL_MODULE}: ${INVARIANTS.join(', ')} hold`,
    result: simulate(PROTOCOL_MODULE, INVARIANTS, exploration, TIMEOUT_MS),
    good: (r) => verdict(r) === 'ok',
  },
  {
    name: `${MUTANT_MODULE}: ${MUTANT_BREAKS} is violated`,
    result: simulate(MUTANT_MODULE, [MUTANT_BREAKS], exploration, TIMEOUT_MS),
    good: (r) => verdict(r) === 'violation',
  },
  {
    name: `${PROTOCOL_MODULE}: the replays pass`,
    result: replay(TIMEOUT_MS),
    good: (r) => r.code === 0 && passedReplays(r).length === REPLAYS.length,
  },
];

console.log(
  `quint on test/protocol-model/outbox.qnt: seed ${exploration.seed}, ${exploration.maxSteps} steps, ${exploration.maxSamples} histories`,
);
let failed = false;
for (const run of runs) {
  const result = await run.result;
  const good = run.good(result);
  failed ||= !good;
  // The example history of a simulation is long and says nothing when the verdict is the expected one.
  const verdictAt = Math.max(result.output.indexOf('[ok]'), result.output.indexOf('[violation]'));
  const shown = good && verdictAt >= 0 ? result.output.slice(verdictAt) : result.output;
  console.log(`\n${good ? 'PASS' : 'FAIL'} ${run.name} (${(result.ms / 1000).toFixed(1)} s)\n${shown.trim()}`);
}
process.exitCode = failed ? 1 : 0;
