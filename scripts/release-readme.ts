// The README a public package ships. In the repository its links are relative (`../../docs/cli.md`),
// which is right on the repository's own pages and dead in a tarball, which holds no docs/. So the
// prepack (release-prepack.ts) writes the README with those links made absolute, from the root
// package.json's `homepage` (the one place the project's URL is stated), and the postpack
// (release-postpack.ts) puts the repository's README back. docs/releasing.md says why.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';

/** The branch the repository's pages are read from (changesets' `baseBranch`, `.changeset/config.json`). */
const BRANCH = 'main';

/**
 * Where the postpack finds the repository's README while the shipped one is in its place: inside the
 * package's node_modules, which git ignores and no tarball holds, and a pack that fails between the
 * two scripts leaves it there for the next prepack to restore first.
 */
export const README_BACKUP = 'node_modules/.release-readme/README.md';

/** The address of the repository's file (or folder) `path`, relative to its root, from `homepage`. */
export function repositoryFileUrl(homepage: string, path: string): string {
  return `${homepage.replace(/\/+$/, '')}/blob/${BRANCH}/${path}`;
}

/** A link target that names a place by itself: a scheme (`https:`, `mailto:`), `//host`, or an anchor of this page. */
function isAbsolute(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//') || target.startsWith('#');
}

/**
 * `markdown`, a README at `packagePath` in the repository (e.g. `packages/cli`), with every relative
 * link — inline `[text](target)` and `![alt](target)`, reference definitions `[id]: target`, and
 * HTML `href`/`src` — made the absolute address of its target in the repository. A leading `/` is
 * the repository's root, as on its pages. Fenced code blocks are left alone. Throws on a link that
 * leaves the repository.
 */
export function absoluteLinks(markdown: string, packagePath: string, homepage: string): string {
  const absolute = (target: string): string => {
    if (isAbsolute(target)) return target;
    const [, path = '', rest = ''] = /^([^#?]*)(.*)$/.exec(target) ?? [];
    const resolved = path.startsWith('/')
      ? posix.normalize(path.slice(1))
      : posix.normalize(posix.join(packagePath, path || '.'));
    if (resolved === '..' || resolved.startsWith('../'))
      throw new Error(`${packagePath}/README.md links to ${target}, outside the repository`);
    return repositoryFileUrl(homepage, resolved === '.' ? '' : resolved) + rest;
  };
  let fence: string | undefined;
  return markdown
    .split('\n')
    .map((line) => {
      const marker = /^\s{0,3}(`{3,}|~{3,})/.exec(line)?.[1];
      if (fence) {
        if (marker?.startsWith(fence)) fence = undefined;
        return line;
      }
      if (marker) {
        fence = marker;
        return line;
      }
      return line
        .replace(/(\]\(\s*<?)([^)\s>]+)/g, (_, open: string, target: string) => open + absolute(target))
        .replace(/^(\s{0,3}\[[^\]]+\]:\s*<?)([^\s>]+)/, (_, open: string, target: string) => open + absolute(target))
        .replace(
          /(\b(?:href|src)=(["']))(.*?)\2/g,
          (_, open: string, quote: string, target: string) => open + absolute(target) + quote,
        );
    })
    .join('\n');
}

/** The root package.json's `homepage`: where the repository's pages are. */
export function projectHomepage(): string {
  const { homepage } = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as {
    homepage?: string;
  };
  if (!homepage) throw new Error('the root package.json has no homepage: the README links are built from it');
  return homepage;
}

/**
 * Puts the README to ship in the place of the package's own (the prepack), keeping the repository's
 * at {@link README_BACKUP}. A backup left by a pack that never reached its postpack is restored first.
 */
export function writeShippedReadme(packageDir: string, packagePath: string, homepage: string): void {
  restoreReadme(packageDir);
  const readme = join(packageDir, 'README.md');
  if (!existsSync(readme)) return;
  const source = readFileSync(readme, 'utf8');
  const shipped = absoluteLinks(source, packagePath, homepage);
  if (shipped === source) return;
  const backup = join(packageDir, README_BACKUP);
  mkdirSync(dirname(backup), { recursive: true });
  writeFileSync(backup, source);
  writeFileSync(readme, shipped);
}

/** Puts the repository's README back (the postpack); nothing to do when none was swapped. */
export function restoreReadme(packageDir: string): void {
  const backup = join(packageDir, README_BACKUP);
  if (existsSync(backup)) renameSync(backup, join(packageDir, 'README.md'));
}
