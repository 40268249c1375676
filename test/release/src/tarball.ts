import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { mustRun } from './command.js';

/** What a package tarball holds: every file's sha256 by path (under `package/`), and its manifest. */
export interface TarballContents {
  readonly files: Record<string, string>;
  readonly manifest: Record<string, unknown>;
}

/** The manifest's maps of dependency name → range. */
const DEPENDENCY_FIELDS = ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies'];

/** What two tarballs must agree on to ship the same package (see {@link shippedPackage}). */
export interface ShippedPackage {
  /** Every file's sha256 but package.json's. */
  readonly files: Record<string, string>;
  /** package.json as JSON text, the entries of its dependency maps sorted by name. */
  readonly manifest: string;
}

/**
 * `contents` as far as a consumer can tell: every file byte for byte, and the manifest in its own
 * order except inside the dependency maps. pnpm 10 writes a packed manifest's dependency entries in
 * the order its `workspace:` lookups happen to finish, which changes from one pack to the next
 * (pnpm/pnpm#10167; docs/releasing.md); the order of a map's entries means nothing to an installer.
 */
export function shippedPackage(contents: TarballContents): ShippedPackage {
  const files = Object.fromEntries(Object.entries(contents.files).filter(([path]) => path !== 'package.json'));
  const manifest = { ...contents.manifest };
  for (const field of DEPENDENCY_FIELDS) {
    const map = manifest[field] as Record<string, string> | undefined;
    if (map) manifest[field] = Object.fromEntries(Object.entries(map).sort(([a], [b]) => a.localeCompare(b)));
  }
  return { files, manifest: JSON.stringify(manifest, null, 2) };
}

/** Unpacks `tgz` into the empty folder `dir` and reads what it holds. */
export async function readTarball(tgz: string, dir: string, env: NodeJS.ProcessEnv): Promise<TarballContents> {
  mkdirSync(dir, { recursive: true });
  await mustRun('tar', ['xzf', tgz, '-C', dir], { cwd: dir, env });
  const root = join(dir, 'package');
  const files: Record<string, string> = {};
  for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = join(entry.parentPath, entry.name);
    files[relative(root, file)] = createHash('sha256').update(readFileSync(file)).digest('hex');
  }
  return { files, manifest: JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<string, unknown> };
}

/** Downloads the tarball the registry serves for `name@version` into `dir`; resolves with its path. */
export async function downloadTarball(
  registryUrl: string,
  name: string,
  version: string,
  dir: string,
): Promise<string> {
  const packument = (await (await fetch(`${registryUrl}${name.replace('/', '%2f')}`)).json()) as {
    versions: Record<string, { dist: { tarball: string } }>;
  };
  const url = packument.versions[version]?.dist.tarball;
  if (!url) throw new Error(`the registry has no ${name}@${version}`);
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url} answered ${response.status}`);
  const file = join(dir, `${name.replace('@', '').replace('/', '-')}-${version}.tgz`);
  writeFileSync(file, Buffer.from(await response.arrayBuffer()));
  return file;
}
