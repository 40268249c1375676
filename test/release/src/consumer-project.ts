import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { mustRun } from './command.js';
import { REPO_ROOT, readManifest } from './workspace.js';

/** The consumer's source and its two tsconfigs (node16 and bundler resolution). */
const FIXTURE = join(import.meta.dirname, '..', 'consumer');
/** The consumer's own dependencies besides @outbox/*, at the ranges the repository itself uses. */
const THIRD_PARTY = ['kysely', 'pg', '@openfga/sdk', '@types/pg', '@types/node'];

/** What the consumer printed on its `RESULT` line (see consumer/main.ts). */
export interface ConsumerResult {
  readonly delivered: number;
  readonly poisonedInOutage: number;
  readonly revived: string[];
  readonly redelivered: number;
  readonly tuples: string[];
}

/**
 * Makes a project in the empty folder `dir` that depends on `packages` (name → exact version) from
 * the registry at `registryUrl` — its `.npmrc` sends the @outbox scope there, everything else to the
 * default registry — and installs it with `client`. `env` is the whole environment of the installs.
 */
export async function installConsumer(
  dir: string,
  client: 'npm' | 'pnpm',
  registryUrl: string,
  packages: Record<string, string>,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  cpSync(FIXTURE, dir, { recursive: true });
  const repoRanges = readManifest(REPO_ROOT).devDependencies as Record<string, string>;
  const dependencies = { ...packages, ...Object.fromEntries(THIRD_PARTY.map((name) => [name, repoRanges[name]])) };
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify({ name: 'outbox-consumer', private: true, type: 'module', dependencies }, null, 2)}\n`,
  );
  writeFileSync(join(dir, '.npmrc'), `@outbox:registry=${registryUrl}\n`);
  const args = client === 'npm' ? ['install', '--no-audit', '--no-fund'] : ['install', '--no-frozen-lockfile'];
  await mustRun(client, args, { cwd: dir, env, timeoutMs: 180_000 });
}

/** Typechecks the installed consumer under both resolutions, compiles it (node16) and runs it. */
export async function typecheckAndRun(dir: string, env: NodeJS.ProcessEnv): Promise<ConsumerResult> {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  await mustRun(process.execPath, [tsc, '-p', 'tsconfig.bundler.json'], { cwd: dir, env });
  await mustRun(process.execPath, [tsc, '-p', 'tsconfig.node16.json'], { cwd: dir, env });
  const output = await mustRun(process.execPath, ['dist/main.js'], { cwd: dir, env });
  const line = output.split('\n').find((l) => l.startsWith('RESULT '));
  if (!line) throw new Error(`the consumer printed no RESULT line:\n${output}`);
  return JSON.parse(line.slice('RESULT '.length)) as ConsumerResult;
}

/**
 * What the installed `outbox` bin (`node_modules/.bin/outbox`, as npm and pnpm link it) prints for
 * `--help` and for each command's `--help`, one after the other; rejects when any of them fails.
 */
export async function installedBinHelp(dir: string, env: NodeJS.ProcessEnv): Promise<string> {
  const bin = join(dir, 'node_modules', '.bin', 'outbox');
  const main = await mustRun(bin, ['--help'], { cwd: dir, env });
  const commands = [...main.matchAll(/^ {2}([a-z]+)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  if (commands.length === 0) throw new Error(`outbox --help listed no command:\n${main}`);
  const texts = [main];
  for (const command of commands) texts.push(await mustRun(bin, [command, '--help'], { cwd: dir, env }));
  return texts.join('\n');
}

/** The version of `name` the consumer in `dir` got installed. */
export function installedVersion(dir: string, name: string): string {
  return (JSON.parse(readFileSync(join(dir, 'node_modules', name, 'package.json'), 'utf8')) as { version: string })
    .version;
}
