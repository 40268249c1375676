import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { once } from 'node:events';
import type { Readable } from 'node:stream';

/** A service started as a child process (`node --import tsx <entry>`, or its package script), as `main` runs it. */
export interface ServiceProcess {
  /** The URL it printed when ready. */
  readonly url: string;
  /** The pid of the child started (node, or pnpm for a package script). */
  readonly pid: number;
  /** Everything it printed so far (stdout and stderr). */
  output(): string;
  /** Resolves with its exit code once it exited (null after a signal). */
  exited(): Promise<number | null>;
  /** Sends SIGTERM and resolves with the exit code once it exited (SIGKILL after `timeoutMs`). */
  terminate(timeoutMs?: number): Promise<number | null>;
}

/**
 * Runs `entry` (e.g. `src/main.ts`) of the package in `cwd` with `env` (on top of this process's
 * PATH) and waits for its `ready at <url>` line.
 */
export async function startServiceProcess(
  cwd: string,
  entry: string,
  env: Record<string, string>,
  readyTimeoutMs = 20_000,
): Promise<ServiceProcess> {
  return watchUntilReady(
    spawn(process.execPath, ['--import', 'tsx', entry], {
      cwd,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    entry,
    readyTimeoutMs,
  );
}

/** Runs `pnpm <script>` (e.g. `start`) in the package in `cwd`, as an operator would, and waits for its `ready at <url>` line. */
export async function startPackageScript(
  cwd: string,
  script: string,
  env: Record<string, string>,
  readyTimeoutMs = 30_000,
): Promise<ServiceProcess> {
  return watchUntilReady(
    spawn('pnpm', [script], {
      cwd,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    `pnpm ${script}`,
    readyTimeoutMs,
  );
}

/**
 * The URL of `child`'s `ready at <url>` line. Rejects, with `output()` in the message, when it
 * exits first or is not ready after `timeoutMs` (then it is killed).
 */
export function readyUrl(
  child: ChildProcessByStdio<null, Readable, Readable>,
  what: string,
  timeoutMs: number,
  output: () => string,
): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} did not get ready within ${timeoutMs} ms:\n${output()}`));
    }, timeoutMs);
    const onData = () => {
      const match = /ready at (http:\/\/[^\s"]+)/.exec(output());
      if (match?.[1]) {
        clearTimeout(timer);
        child.stdout.off('data', onData);
        resolve(match[1]);
      }
    };
    child.stdout.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code} before it was ready:\n${output()}`));
    });
  });
}

async function watchUntilReady(
  child: ChildProcessByStdio<null, Readable, Readable>,
  what: string,
  readyTimeoutMs: number,
): Promise<ServiceProcess> {
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const url = await readyUrl(child, what, readyTimeoutMs, () => output);
  return {
    url,
    pid: child.pid as number,
    output: () => output,
    exited: () => exited,
    async terminate(timeoutMs = 15_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Runs a script (`node --import tsx <entry>`) to completion; resolves with its exit code and output. */
export async function runScript(
  cwd: string,
  entry: string,
  env: Record<string, string>,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    cwd,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, output };
}
