import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { mustRun } from './command.js';

/** What a package tarball holds: every file's sha256 by path (under `package/`), and its manifest. */
export interface TarballContents {
  readonly files: Record<string, string>;
  readonly manifest: Record<string, unknown>;
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
export async function downloadTarball(registryUrl: string, name: string, version: string, dir: string): Promise<string> {
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
