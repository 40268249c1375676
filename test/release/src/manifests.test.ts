// The public manifests as docs/releasing.md describes them, checked without packing anything (the
// release rehearsal, release.test.ts, checks what the packed tarballs then hold).
import { join } from 'node:path';
import ts from 'typescript';
import { beforeAll, expect, test } from 'vitest';
import { shellEnvironment } from './shell-environment.js';
import {
  linksOf,
  projectLinks,
  publicPackages,
  readManifest,
  REPO_ROOT,
  SOURCE_CONDITION,
  workspacePackages,
  type WorkspacePackage,
} from './workspace.js';

let published: WorkspacePackage[];
beforeAll(async () => {
  published = publicPackages(await workspacePackages(REPO_ROOT, shellEnvironment()));
});

/** `[specifier, source file]` for every export of every public package, e.g. `['@outbox/outbox', './packages/outbox/src/index.ts']`. */
function sourceEntries(): Array<[string, string]> {
  return published.flatMap((p) =>
    Object.entries(readManifest(p.dir).exports as Record<string, Record<string, string>>).map(
      ([subpath, conditions]): [string, string] => [
        join(p.name, subpath),
        `./${join(p.path, conditions[SOURCE_CONDITION] ?? '(none)')}`,
      ],
    ),
  );
}

test('every export sends the repo to src/<entry>.ts and everyone else to dist/<entry>.js and .d.ts, source condition first', () => {
  expect(published.length).toBeGreaterThan(0);
  for (const p of published) {
    for (const [subpath, conditions] of Object.entries(
      readManifest(p.dir).exports as Record<string, Record<string, string>>,
    )) {
      const entry = /^\.\/src\/(.+)\.ts$/.exec(conditions[SOURCE_CONDITION] ?? '')?.[1];
      expect(entry, `${p.name} exports["${subpath}"]["${SOURCE_CONDITION}"]`).toBeDefined();
      // Order matters: TypeScript and Vite take the first condition they know.
      expect(conditions, `${p.name} exports["${subpath}"]`).toStrictEqual({
        [SOURCE_CONDITION]: `./src/${entry}.ts`,
        types: `./dist/${entry}.d.ts`,
        default: `./dist/${entry}.js`,
      });
      expect(Object.keys(conditions)[0]).toBe(SOURCE_CONDITION);
    }
  }
});

test('tsconfig paths (what tsx reads) mirror the source condition of every public export, and name nothing else', () => {
  const { config, error } = ts.readConfigFile(join(REPO_ROOT, 'tsconfig.json'), ts.sys.readFile);
  expect(error).toBeUndefined();
  const paths = (config as { compilerOptions: { paths: Record<string, string[]> } }).compilerOptions.paths;
  expect(Object.entries(paths).sort()).toEqual(
    sourceEntries()
      .map(([specifier, file]) => [specifier, [file]])
      .sort(),
  );
});

test("the root package.json states the project's URL, and every public manifest carries it with its own folder", () => {
  const root = readManifest(REPO_ROOT);
  expect(root.repository).toEqual({ type: 'git', url: expect.stringMatching(/^git\+https:\/\/[^/]+\/.+\.git$/) });
  expect(root.homepage).toMatch(/^https:\/\/[^/]+\/./);
  expect(root.bugs).toEqual({ url: expect.stringMatching(/^https:\/\/[^/]+\/./) });
  for (const p of published) expect(linksOf(readManifest(p.dir)), p.name).toEqual(projectLinks(REPO_ROOT, p.path));
});

test('every public manifest says what it ships, builds nothing when packed, and puts its README back after packing', () => {
  for (const p of published) {
    const m = readManifest(p.dir);
    expect((m.keywords as string[] | undefined)?.length, p.name).toBeGreaterThan(0);
    expect(m.license, p.name).toBe('MIT');
    expect(m.files, p.name).toEqual([
      ...(m.bin === undefined ? [] : ['bin']),
      'dist',
      '!dist/build-inputs.json',
      'CHANGELOG.md',
      'LICENSE',
    ]);
    expect(m.scripts, p.name).toEqual({
      build: 'tsup',
      prepack: 'node --import tsx ../../scripts/release-prepack.ts',
      postpack: 'node --import tsx ../../scripts/release-postpack.ts',
    });
    expect(m.publishConfig, `${p.name}: nothing may be swapped in at pack time`).toEqual({ access: 'restricted' });
  }
});
