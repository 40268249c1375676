import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { StackError } from './stack-error.js';

const run = promisify(execFile);

/** The OpenFGA release every test, the demo and CI run against. */
export const OPENFGA_VERSION = 'v1.18.1';
const OPENFGA_MODULE = 'github.com/openfga/openfga';

/** The pinned version as a whole token: not the start of v1.18.10 or v1.18.1-rc1. */
const PINNED = `${OPENFGA_VERSION.replaceAll('.', '\\.')}(?![\\w.+-])`;

async function goPath(): Promise<string | undefined> {
  try {
    const { stdout } = await run('go', ['env', 'GOPATH']);
    return stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Whether `bin` is OpenFGA at the pinned version: its own `version` answer, else the Go build info. */
async function isPinnedVersion(bin: string): Promise<boolean> {
  try {
    const { stdout, stderr } = await run(bin, ['version'], { timeout: 10_000 });
    if (new RegExp(PINNED).test(`${stdout}${stderr}`)) return true;
  } catch {
    return false;
  }
  try {
    // A plain `go install` leaves the version string at "dev"; the module version is in the build info.
    const { stdout } = await run('go', ['version', '-m', bin], { timeout: 10_000 });
    return new RegExp(`\\bmod\\s+${OPENFGA_MODULE.replaceAll('.', '\\.')}\\s+${PINNED}`).test(stdout);
  } catch {
    return false;
  }
}

async function candidates(): Promise<string[]> {
  const list: string[] = [];
  if (process.env.OPENFGA_BIN) list.push(process.env.OPENFGA_BIN);
  const gopath = (await goPath()) ?? join(homedir(), 'go');
  list.push(join(gopath, 'bin', 'openfga'));
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir) list.push(join(dir, 'openfga'));
  return [...new Set(list)].filter((path) => existsSync(path));
}

/**
 * Finds the `openfga` binary at the pinned version, or builds it with `go install` (minutes on a
 * cold module cache; later runs reuse `$(go env GOPATH)/bin/openfga`). Set `OPENFGA_BIN` to use a
 * binary elsewhere.
 */
export async function ensureOpenFgaBinary(
  options: { install?: boolean; log?: (line: string) => void } = {},
): Promise<string> {
  for (const bin of await candidates()) {
    if (await isPinnedVersion(bin)) return bin;
  }
  if (options.install === false) {
    throw new StackError(
      `OpenFGA ${OPENFGA_VERSION} was not found (looked at OPENFGA_BIN, $(go env GOPATH)/bin and PATH). ` +
        `Run \`pnpm stack:install\`, or \`go install ${OPENFGA_MODULE}/cmd/openfga@${OPENFGA_VERSION}\`.`,
    );
  }
  const gopath = await goPath();
  if (gopath === undefined) {
    throw new StackError(
      `OpenFGA ${OPENFGA_VERSION} is missing and Go is not installed to build it. Install Go ≥ 1.25 ` +
        `(it builds \`go install ${OPENFGA_MODULE}/cmd/openfga@${OPENFGA_VERSION}\`), or set OPENFGA_BIN ` +
        `to an openfga ${OPENFGA_VERSION} binary, or OPENFGA_API_URL to a running server.`,
    );
  }
  options.log?.(`building OpenFGA ${OPENFGA_VERSION} with go install (a few minutes the first time)…`);
  const args = [
    'install',
    '-ldflags',
    `-X ${OPENFGA_MODULE}/internal/build.Version=${OPENFGA_VERSION}`,
    `${OPENFGA_MODULE}/cmd/openfga@${OPENFGA_VERSION}`,
  ];
  await new Promise<void>((resolve, reject) => {
    const child = spawn('go', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === 0) resolve();
      else reject(new StackError(`go ${args.join(' ')} failed (exit ${code}):\n${output.slice(-4_000)}`));
    });
  });
  const bin = join(gopath, 'bin', 'openfga');
  if (!(await isPinnedVersion(bin))) {
    throw new StackError(`go install finished but ${bin} does not report OpenFGA ${OPENFGA_VERSION}`);
  }
  return bin;
}
