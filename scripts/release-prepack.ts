// The `prepack` of every public package (`node --import tsx ../../scripts/release-prepack.ts`, which
// npm and pnpm run in the package's folder before they pack or publish it). It builds nothing —
// `pnpm release` builds once, before publishing anything — it refuses to pack what would ship wrong,
// puts the repository's LICENSE beside the manifest, and swaps in the README to ship, its links
// absolute (release-readme.ts; the postpack swaps it back). docs/releasing.md says why.
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { SOURCE_CONDITION } from '../tsup.config.base.js';
import { BUILD_INPUTS_FILE, buildInputs, changedInputs } from './release-build-inputs.js';
import { projectHomepage, writeShippedReadme } from './release-readme.js';

/** The command that packs a package and checks the tarball as `attw --pack` would (which runs npm pack). */
const CHECK_PACKAGE = 'pnpm check:package';

const DEPENDENCY_FIELDS = ['dependencies', 'devDependencies', 'peerDependencies', 'optionalDependencies'] as const;

interface Manifest {
  readonly name: string;
  readonly exports: Record<string, Record<string, string>>;
  readonly [field: string]: unknown;
}

/** `workspace:` ranges, as `field name range`: only pnpm turns them into versions when it packs. */
function workspaceRanges(manifest: Manifest): string[] {
  return DEPENDENCY_FIELDS.flatMap((field) =>
    Object.entries((manifest[field] ?? {}) as Record<string, string>)
      .filter(([, range]) => range.startsWith('workspace:'))
      .map(([name, range]) => `${field} ${name} ${range}`),
  );
}

/** Why dist/ is not what the current sources build, or undefined when it is. */
function staleDist(packageDir: string): string | undefined {
  const recordFile = join(packageDir, BUILD_INPUTS_FILE);
  if (!existsSync(recordFile)) return `${BUILD_INPUTS_FILE} is missing: run \`pnpm build\` first.`;
  const recorded = JSON.parse(readFileSync(recordFile, 'utf8')) as Record<string, string>;
  const changed = changedInputs(recorded, buildInputs(packageDir));
  return changed.length > 0
    ? `dist/ was built from other sources (${changed.join(', ')} changed since): run \`pnpm build\` first.`
    : undefined;
}

/**
 * What keeps the package in `packageDir` from being packed, one line each (empty: pack it).
 * `userAgent` is `npm_config_user_agent`, which starts with `pnpm/` when pnpm runs the script.
 */
function packProblems(packageDir: string, userAgent: string): string[] {
  const manifest = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as Manifest;
  const problems: string[] = [];
  const ranges = workspaceRanges(manifest);
  if (ranges.length > 0 && !userAgent.startsWith('pnpm/')) {
    problems.push(
      `${userAgent.split(' ')[0] || 'this client'} would publish these ranges as they are (${ranges.join('; ')}): ` +
        'only pnpm turns workspace: ranges into versions. Run `pnpm pack` instead, or `pnpm release` to publish; ' +
        `to check the packed package's types (what \`attw --pack\` does, through npm), \`${CHECK_PACKAGE}\` at the repository's root.`,
    );
  }
  for (const [subpath, conditions] of Object.entries(manifest.exports)) {
    for (const [condition, target] of Object.entries(conditions)) {
      if (condition !== SOURCE_CONDITION && !existsSync(join(packageDir, target))) {
        problems.push(
          `exports["${subpath}"].${condition} is ${target}, which does not exist: run \`pnpm build\` first.`,
        );
      }
    }
  }
  const stale = staleDist(packageDir);
  if (stale) problems.push(stale);
  return problems;
}

const problems = packProblems(process.cwd(), process.env.npm_config_user_agent ?? '');
if (problems.length > 0) {
  const { name } = JSON.parse(readFileSync('package.json', 'utf8')) as Manifest;
  console.error(`prepack: refusing to pack ${name}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  process.exit(1);
}
const repository = join(import.meta.dirname, '..');
copyFileSync(join(repository, 'LICENSE'), 'LICENSE');
writeShippedReadme(process.cwd(), relative(repository, process.cwd()), projectHomepage());
