import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A changeset's bump of one package, as `changeset version` applies it. */
export type Bump = 'major' | 'minor' | 'patch';

const BUMP_ORDER: readonly Bump[] = ['patch', 'minor', 'major'];

/** One pending `.changeset/<name>.md`: the bumps of its frontmatter, and the summary below it. */
export interface PendingChangeset {
  /** The file's name in `.changeset/`. */
  readonly file: string;
  /** Package name → bump. */
  readonly releases: ReadonlyMap<string, Bump>;
  readonly summary: string;
}

/** Parses one changeset's text; throws on what `changeset version` would also refuse to read. */
export function parseChangeset(file: string, text: string): PendingChangeset {
  const match = /^---\r?\n([\s\S]*?)\r?\n---\r?\n([\s\S]*)$/.exec(text);
  if (!match) throw new Error(`.changeset/${file}: no frontmatter between two --- lines`);
  const releases = new Map<string, Bump>();
  for (const line of match[1]!.split(/\r?\n/).filter((l) => l.trim())) {
    const entry = /^\s*(['"]?)([^'"\s:]+)\1\s*:\s*(major|minor|patch)\s*$/.exec(line);
    if (!entry) throw new Error(`.changeset/${file}: cannot read the frontmatter line ${JSON.stringify(line)}`);
    releases.set(entry[2]!, entry[3] as Bump);
  }
  return { file, releases, summary: match[2]!.trim() };
}

/** Every pending changeset of the repository at `root` (`.changeset/*.md` but its README). */
export function pendingChangesets(root: string): PendingChangeset[] {
  const dir = join(root, '.changeset');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.md') && f !== 'README.md')
    .sort()
    .map((f) => parseChangeset(f, readFileSync(join(dir, f), 'utf8')));
}

/** Package name → the highest bump any of `changesets` gives it (what `changeset version` applies). */
export function highestBumps(changesets: readonly PendingChangeset[]): Map<string, Bump> {
  const highest = new Map<string, Bump>();
  for (const { releases } of changesets) {
    for (const [name, bump] of releases) {
      const current = highest.get(name);
      if (!current || BUMP_ORDER.indexOf(bump) > BUMP_ORDER.indexOf(current)) highest.set(name, bump);
    }
  }
  return highest;
}

/** `version` (`x.y.z`) after `bump`, as semver (and changesets) count: a minor on 0.0.0 is 0.1.0. */
export function bumpedVersion(version: string, bump: Bump): string {
  const parts = /^(\d+)\.(\d+)\.(\d+)$/.exec(version);
  if (!parts) throw new Error(`${version} is not a release version (x.y.z)`);
  const [major, minor, patch] = parts.slice(1).map(Number) as [number, number, number];
  if (bump === 'major') return `${major + 1}.0.0`;
  if (bump === 'minor') return `${major}.${minor + 1}.0`;
  return `${major}.${minor}.${patch + 1}`;
}
