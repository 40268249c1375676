import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { terminate } from './native-openfga.js';
import { PROCESS_WATCHDOG, startWatchdog } from './watchdog.js';

/** A server process the stack started, taken down with this process however it ends. */
export interface SupervisedProcess {
  readonly child: ChildProcess;
  /** The last few KB it wrote to stderr. */
  stderr(): string;
  /** The exit code or signal once it has exited, else undefined. */
  exited(): string | undefined;
  /** SIGTERM, SIGKILL after 5 s, then removes `dir`. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Spawns `bin args` (stdout ignored, stderr kept), kills it at this process's exit and, through a
 * watchdog, even when this process is SIGKILLed; `dir` (its config) is removed at `stop()`.
 * `name` is the process's command name as `ps` shows it (the watchdog checks it before killing).
 */
export function superviseProcess(bin: string, args: readonly string[], name: string, dir: string): SupervisedProcess {
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-8_000)));
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.removeListener('exit', killOnExit));
  const watchdog = startWatchdog(PROCESS_WATCHDOG, [String(child.pid), name]);
  let stopped: Promise<void> | undefined;
  return {
    child,
    stderr: () => stderr,
    exited: () =>
      child.exitCode !== null || child.signalCode !== null ? String(child.exitCode ?? child.signalCode) : undefined,
    stop: () =>
      (stopped ??= (async () => {
        await terminate(child);
        await watchdog.disarm();
        rmSync(dir, { recursive: true, force: true });
      })()),
  };
}
