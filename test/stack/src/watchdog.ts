import { spawn } from 'node:child_process';
import { once } from 'node:events';

/** A watchdog started by {@link startWatchdog}. */
export interface Watchdog {
  /** Stops the watchdog without running its script (what started it was stopped normally). */
  disarm(): Promise<void>;
}

/**
 * Runs the shell `script` (with `args` as $1, $2, …) as soon as this process is gone, however it
 * goes: a SIGKILL, the OOM killer or a crash run no exit handler, and a server started by a test
 * run would otherwise keep running, orphaned, with its data directory, after every such run. The
 * watchdog is a `sh` in its own process group (a Ctrl-C aimed at the run does not take it first)
 * that blocks reading a pipe from this process: the kernel closes the pipe when this process dies,
 * whatever killed it. It holds no reference on the event loop.
 */
export function startWatchdog(script: string, args: readonly string[]): Watchdog {
  const child = spawn('sh', ['-c', `read _ignored; ${script}`, 'outbox-stack-watchdog', ...args], {
    stdio: ['pipe', 'ignore', 'ignore'],
    detached: true,
  });
  child.on('error', () => undefined);
  child.stdin?.on('error', () => undefined);
  child.unref();
  (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  let disarmed: Promise<void> | undefined;
  return {
    disarm() {
      disarmed ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
        const exited = once(child, 'exit');
        child.ref(); // else the event loop may end before the exit is seen, and whoever awaits stop() never resumes
        child.kill('SIGKILL');
        await exited;
        child.stdin?.destroy();
      })();
      return disarmed;
    },
  };
}

/**
 * Stops a Postgres cluster left behind (the postmaster named by `$1/data/postmaster.pid`, which
 * Postgres removes when it shuts down cleanly; SIGQUIT is its immediate shutdown) and removes
 * the cluster's directory `$1`.
 */
export const POSTGRES_WATCHDOG = `
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$1"`;

/** SIGKILLs process `$1` if it is still the program named `$2` (its pid was not reused). */
export const PROCESS_WATCHDOG = `
[ "$(ps -p "$1" -o comm= 2>/dev/null)" = "$2" ] && kill -KILL "$1"`;
