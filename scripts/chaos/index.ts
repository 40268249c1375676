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
const log = (line: string) => console.error(`[chaos ${((performance.now() - started) / 1000).toFixed(1).padStart(5)}s] ${line}`);

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
const interrupt = (signal: NodeJS.Signals) => {
  if (abort.signal.aborted) {
    // A second Ctrl-C: leave now. The drainers exit when their IPC channel closes, and the stack's
    // exit hooks and watchdogs stop its servers.
    process.exit(1);
  }
  log(`${signal}: stopping everything the run started (again to exit at once)`);
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
