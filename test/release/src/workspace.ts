import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { mustRun } from './command.js';

/** The exports condition that sends the repo to a public package's source (tsup.config.base.ts builds from it). */
export const SOURCE_CONDITION = '@outbox/source';

/** The repository this package lives in. */
export const REPO_ROOT = join(import.meta.dirname, '..', '..', '..');

/** One project of the pnpm workspace, as `pnpm ls -r` lists it. */
export interface WorkspacePackage {
  readonly name: string;
  readonly version: string;
  /** Absolute. */
  readonly dir: string;
  /** Relative to the workspace root (`''` for the root). */
  readonly path: string;
  readonly private: boolean;
}

/** Every project of the workspace at `root`, the root included. `env` must put pnpm on PATH. */
export async function workspacePackages(root: string, env: NodeJS.ProcessEnv): Promise<WorkspacePackage[]> {
  const listed = JSON.parse(
    await mustRun('pnpm', ['ls', '--recursive', '--depth', '-1', '--json'], { cwd: root, env }),
  ) as Array<{
    name: string;
    version?: string;
    path: string;
    private: boolean;
  }>;
  return listed.map((p) => ({
    name: p.name,
    version: p.version ?? '',
    dir: p.path,
    path: relative(root, p.path),
    private: p.private,
  }));
}

/** The published packages: every `packages/*` that is not private (a new one is picked up by itself). */
export function publicPackages(all: readonly WorkspacePackage[]): WorkspacePackage[] {
  return all.filter((p) => !p.private && /^packages\/[^/]+$/.test(p.path));
}

/** A package's manifest, as it is on disk now. */
export function readManifest(dir: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
}

/** Where a published package says it comes from: the manifest fields npm shows as its links. */
export interface ProjectLinks {
  readonly repository: { readonly type: string; readonly url: string; readonly directory: string };
  readonly homepage: string;
  readonly bugs: { readonly url: string };
}

/**
 * The links every public manifest must carry: the root package.json's `repository`, `homepage` and
 * `bugs` (the one place the project's URL is stated, see the README's "Publishing"), with the
 * package's folder (`path`, e.g. `packages/cli`) as the repository's `directory`.
 */
export function projectLinks(root: string, path: string): ProjectLinks {
  const { repository, homepage, bugs } = readManifest(root) as {
    repository: { type: string; url: string };
    homepage: string;
    bugs: { url: string };
  };
  return {
    repository: { type: repository.type, url: repository.url, directory: path },
    homepage,
    bugs: { url: bugs.url },
  };
}

/** A manifest's own `repository`, `homepage` and `bugs`, to compare with {@link projectLinks}. */
export function linksOf(manifest: Record<string, unknown>): Record<keyof ProjectLinks, unknown> {
  return { repository: manifest.repository, homepage: manifest.homepage, bugs: manifest.bugs };
}
