// `pnpm check:package [--pack-destination DIR] [PACKAGE_DIR…]` (docs/releasing.md): packs each public
// package as `pnpm release` would publish it, and checks the tarball with publint and
// arethetypeswrong. `attw --pack` cannot do it: it runs `npm pack`, which the prepack refuses (npm
// would ship the workspace: ranges as they are). The root script builds first.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = join(import.meta.dirname, '..');
/** The checkers are the release rehearsal's own devDependencies, so their versions are pinned once. */
const CHECKERS = join(ROOT, 'test', 'release', 'node_modules', '.bin');

/** Every `packages/*` whose manifest is not private: what `pnpm release` publishes. */
function publicPackageDirs(): string[] {
  const dir = join(ROOT, 'packages');
  return readdirSync(dir)
    .map((name) => join(dir, name))
    .filter((p) => existsSync(join(p, 'package.json')))
    .filter((p) => !(JSON.parse(readFileSync(join(p, 'package.json'), 'utf8')) as { private?: boolean }).private)
    .sort();
}

/** Runs `command` with this process's output, resolving whether it succeeded (its output says why not). */
function succeeds(command: string, args: readonly string[], cwd: string): boolean {
  try {
    execFileSync(command, args, { cwd, stdio: 'inherit' });
    return true;
  } catch {
    return false;
  }
}

const { values, positionals } = parseArgs({
  options: { 'pack-destination': { type: 'string' } },
  allowPositionals: true,
});
const destination = values['pack-destination']
  ? resolve(values['pack-destination'])
  : mkdtempSync(join(tmpdir(), 'outbox-packed-'));
const packages = positionals.length > 0 ? positionals.map((p) => resolve(p)) : publicPackageDirs();
const failed: string[] = [];
for (const dir of packages) {
  // One folder per package, so its tarball is the one file there whatever pnpm names it.
  const out = join(destination, basename(dir));
  mkdirSync(out, { recursive: true });
  console.log(`\n== ${dir}: pnpm pack --pack-destination ${out}`);
  if (!succeeds('pnpm', ['pack', '--pack-destination', out], dir)) {
    failed.push(`${basename(dir)} (pnpm pack)`);
    continue;
  }
  const tarball = readdirSync(out).find((f) => f.endsWith('.tgz'));
  if (!tarball) {
    failed.push(`${basename(dir)} (no tarball in ${out})`);
    continue;
  }
  const file = join(out, tarball);
  if (!succeeds(join(CHECKERS, 'publint'), ['run', file, '--strict'], dir)) failed.push(`${tarball} (publint)`);
  if (!succeeds(join(CHECKERS, 'attw'), [file, '--profile', 'esm-only'], dir)) failed.push(`${tarball} (attw)`);
}
if (failed.length > 0) {
  console.error(`\ncheck:package: failed: ${failed.join(', ')}`);
  process.exit(1);
}
console.log(`\ncheck:package: ${packages.length} package(s) pass publint and attw; the tarballs are in ${destination}`);
