// The release rehearsal (docs/releasing.md): the documented flow run on a copy of the repository at a
// prerelease version, published to a throwaway Verdaccio, and the packages used from a project
// outside the workspace — installed with npm and with pnpm, typechecked, run against the test stack.
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { freePort, openFgaClientConfig, stackInfo, useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { repositoryFileUrl } from '../../../scripts/release-readme.js';
import { bumpedVersion, highestBumps, pendingChangesets, type Bump } from './changesets.js';
import { mustRun, runCommand } from './command.js';
import { installConsumer, installedBinHelp, installedVersion, typecheckAndRun } from './consumer-project.js';
import { brokenRepositoryLink, isAbsoluteUrl, linkTargets, relativeFileMentions, urlsIn } from './markdown-links.js';
import { commitAll, copyRepository } from './scratch-repository.js';
import { shellEnvironment } from './shell-environment.js';
import { downloadTarball, readTarball, shippedPackage, type TarballContents } from './tarball.js';
import { startRegistry, type Registry } from './verdaccio.js';
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

const PRERELEASE_TAG = 'next';
const BIN = join(import.meta.dirname, '..', 'node_modules', '.bin');

const t = useTestDatabase();
const fga = useOpenFgaStore();

let tmp: string;
let registry: Registry;
let scratch: string;
let before: WorkspacePackage[];
let after: WorkspacePackage[];
let published: WorkspacePackage[];
/** Package name → the highest bump the pending changesets give it, the rehearsal's own included. */
let bumps: Map<string, Bump>;
/** Where the scratch repository's files are shown (its root package.json's homepage). */
let filesBase: string;
const tarballs = new Map<string, { file: string; contents: TarballContents }>();

/** The environment of every command here: a plain shell's, for a publisher whose npmrc names the registry. */
const env = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({
  ...shellEnvironment(),
  CI: 'true',
  TURBO_TELEMETRY_DISABLED: '1',
  DO_NOT_TRACK: '1',
  npm_config_userconfig: join(tmp, 'publisher.npmrc'),
  ...extra,
});
const pnpm = (args: string[], extra?: NodeJS.ProcessEnv) =>
  mustRun('pnpm', args, { cwd: scratch, env: env(extra), timeoutMs: 240_000 });

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'outbox-release-'));
  mkdirSync(join(tmp, 'registry'));
  registry = await startRegistry(join(tmp, 'registry'));
  const host = registry.url.replace(/^http:/, '');
  writeFileSync(
    join(tmp, 'publisher.npmrc'),
    `@outbox:registry=${registry.url}\n${host}:_authToken=${registry.token}\n`,
  );

  scratch = join(tmp, 'repo');
  mkdirSync(scratch);
  await copyRepository(REPO_ROOT, scratch, env());
  await pnpm(['install', '--offline', '--frozen-lockfile']);
  before = await workspacePackages(scratch, env());

  // The flow of docs/releasing.md, step by step, at a prerelease version.
  await pnpm(['changeset', 'pre', 'enter', PRERELEASE_TAG]);
  const patches = publicPackages(before).map((p) => `'${p.name}': patch`);
  writeFileSync(
    join(scratch, '.changeset', 'release-rehearsal.md'),
    `---\n${patches.join('\n')}\n---\n\nThe release rehearsal's change.\n`,
  );
  bumps = highestBumps(pendingChangesets(scratch));
  await pnpm(['version-packages']);
  await commitAll(scratch, 'Version packages', env());
  // changesets reads the scope's registry from this variable (its `npm info` and `pnpm publish` calls).
  await pnpm(['release'], { 'npm_config_@outbox:registry': registry.url });

  filesBase = repositoryFileUrl(readManifest(scratch).homepage as string, '');
  after = await workspacePackages(scratch, env());
  published = publicPackages(after);
  for (const p of published) {
    const file = await downloadTarball(registry.url, p.name, p.version, tmp);
    tarballs.set(p.name, { file, contents: await readTarball(file, join(tmp, 'published', p.path), env()) });
  }
}, 300_000);

afterAll(async () => {
  await registry?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('the release flow', () => {
  test('versions every public package to a prerelease, writes its changelog, tags it, and publishes it under the prerelease tag', async () => {
    expect(published.map((p) => p.name).sort()).toEqual(
      publicPackages(before)
        .map((p) => p.name)
        .sort(),
    );
    for (const p of published) {
      const previous = before.find((b) => b.name === p.name)!.version;
      // The highest bump wins: on 0.0.0, the first release's minor and the rehearsal's patch make 0.1.0.
      const bump = bumps.get(p.name)!;
      expect(p.version, `${p.name} from ${previous} by a ${bump}`).toBe(
        `${bumpedVersion(previous, bump)}-${PRERELEASE_TAG}.0`,
      );
      if (previous === '0.0.0') expect(p.version, `${p.name}'s first release`).toBe(`0.1.0-${PRERELEASE_TAG}.0`);
      const changelog = readFileSync(join(p.dir, 'CHANGELOG.md'), 'utf8');
      expect(changelog, p.name).toContain(`## ${p.version}`);
      expect(changelog, p.name).toContain(`### ${bump[0]!.toUpperCase()}${bump.slice(1)} Changes`);
      const packument = (await (await fetch(`${registry.url}${p.name.replace('/', '%2f')}`)).json()) as {
        'dist-tags': Record<string, string>;
      };
      expect(packument['dist-tags'][PRERELEASE_TAG], p.name).toBe(p.version);
    }
    const tags = (await mustRun('git', ['tag', '--list'], { cwd: scratch, env: env() })).split('\n').filter(Boolean);
    expect(tags.sort()).toEqual(published.map((p) => `${p.name}@${p.version}`).sort());
    // Publishing swapped every README for the one shipped, and put it back (the postpack).
    expect(await mustRun('git', ['status', '--porcelain'], { cwd: scratch, env: env() })).toBe('');
  });

  test('never publishes, versions or tags a private package (services, migrations, test helpers, the root)', async () => {
    const privates = after.filter((p) => !published.some((q) => q.name === p.name));
    expect(privates.map((p) => p.name)).toEqual(
      expect.arrayContaining(['@outbox/root', '@outbox/migrations', '@outbox/test-stack', '@outbox/service-vpc']),
    );
    for (const p of privates) {
      expect(p.private, `${p.name} (${p.path}) must be private`).toBe(true);
      expect((await fetch(`${registry.url}${p.name.replace('/', '%2f')}`)).status, p.name).toBe(404);
      expect(p.version, p.name).toBe(before.find((b) => b.name === p.name)?.version);
    }
    expect(
      readdirSync(join(tmp, 'registry', 'storage', '@outbox'))
        .map((d) => `@outbox/${d}`)
        .sort(),
    ).toEqual(published.map((p) => p.name).sort());
  });
});

describe('the published tarballs', () => {
  test("hold dist, README, CHANGELOG and LICENSE — no sources, no workspace: ranges — carry the project's links, and pass publint and attw (ESM only)", async () => {
    for (const p of published) {
      const { file, contents } = tarballs.get(p.name)!;
      const paths = Object.keys(contents.files);
      expect(paths, p.name).toEqual(expect.arrayContaining(['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE']));
      expect(
        paths.filter(
          (f) =>
            !f.startsWith('dist/') &&
            !(f.startsWith('bin/') && contents.manifest.bin !== undefined) &&
            !['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE'].includes(f),
        ),
        p.name,
      ).toEqual([]);
      expect(paths, p.name).not.toContain('dist/build-inputs.json');
      expect(linksOf(contents.manifest), p.name).toEqual(projectLinks(scratch, p.path));
      const exportsMap = contents.manifest.exports as Record<string, Record<string, string>>;
      for (const [subpath, conditions] of Object.entries(exportsMap)) {
        for (const [condition, target] of Object.entries(conditions)) {
          if (condition !== SOURCE_CONDITION)
            expect(paths, `${p.name} exports["${subpath}"].${condition}`).toContain(target.replace(/^\.\//, ''));
        }
      }
      // A registry user has the tarball and nothing else: a relative link must name a file in it.
      const readme = readFileSync(join(tmp, 'published', p.path, 'package', 'README.md'), 'utf8');
      for (const target of linkTargets(readme)) {
        if (target.startsWith('#') || isAbsoluteUrl(target)) continue;
        expect(paths, `${p.name} README links to ${target}`).toContain(target.split('#')[0]!.replace(/^\.\//, ''));
      }
      for (const url of linkTargets(readme).filter((target) => target.startsWith(filesBase)))
        expect(brokenRepositoryLink(scratch, filesBase, url), `${p.name} README`).toBeUndefined();
      expect(JSON.stringify(contents.manifest), p.name).not.toContain('workspace:');
      const dependencies = (contents.manifest.dependencies ?? {}) as Record<string, string>;
      for (const dep of published.filter((q) => q.name in dependencies))
        expect(dependencies[dep.name], `${p.name} → ${dep.name}`).toBe(`^${dep.version}`);
      await mustRun(join(BIN, 'publint'), ['run', file, '--strict'], { cwd: tmp, env: env() });
      await mustRun(join(BIN, 'attw'), [file, '--profile', 'esm-only', '--no-color', '--no-emoji'], {
        cwd: tmp,
        env: env(),
      });
    }
  }, 120_000);

  test('pnpm check:package packs the published tarball (up to the order of dependency entries) and passes publint and attw; npm pack, which would ship workspace: ranges as they are, is refused and names it', async () => {
    // The documented check (docs/releasing.md), in place of `attw --pack`, which runs npm pack.
    const checked = join(tmp, 'checked');
    await pnpm(['check:package', '--pack-destination', checked]);
    for (const p of published) {
      const out = join(tmp, 'packed', p.path);
      const folder = join(checked, basename(p.dir));
      const pnpmTarball = join(
        folder,
        readdirSync(folder).find((f) => f.endsWith('.tgz'))!,
      );
      const packed = await readTarball(pnpmTarball, join(out, 'pnpm-unpacked'), env());
      expect(shippedPackage(packed), p.name).toEqual(shippedPackage(tarballs.get(p.name)!.contents));

      // What npm would do without the guard: the manifest keeps its workspace: ranges.
      mkdirSync(join(out, 'npm'), { recursive: true });
      await mustRun('npm', ['pack', '--ignore-scripts', '--pack-destination', join(out, 'npm')], {
        cwd: p.dir,
        env: env(),
      });
      const npmTarball = join(
        out,
        'npm',
        readdirSync(join(out, 'npm')).find((f) => f.endsWith('.tgz'))!,
      );
      expect(
        JSON.stringify((await readTarball(npmTarball, join(out, 'npm-unpacked'), env())).manifest),
        p.name,
      ).toContain('"workspace:^"');
      const refused = await runCommand('npm', ['pack', '--pack-destination', join(out, 'npm')], {
        cwd: p.dir,
        env: env(),
      });
      expect(refused.code, p.name).not.toBe(0);
      expect(refused.stderr, p.name).toContain('only pnpm turns workspace: ranges into versions');
      expect(refused.stderr, `${p.name}: the refusal names the check that works`).toContain('`pnpm check:package`');
    }
    // A source changed since the build: no client may pack the stale dist.
    const [first] = published;
    appendFileSync(join(first!.dir, 'src', 'index.ts'), '\n// changed after the build\n');
    const stale = await runCommand('pnpm', ['pack', '--pack-destination', join(tmp, 'stale')], {
      cwd: first!.dir,
      env: env(),
    });
    expect(stale.code).not.toBe(0);
    expect(stale.stderr + stale.stdout).toContain('src/index.ts changed since');
    expect(existsSync(join(tmp, 'stale'))).toBe(false);
  }, 120_000);
});

describe('a consumer outside the workspace', () => {
  test.each(['npm', 'pnpm'] as const)(
    'installs the packages from the registry with %s, runs the outbox bin, typechecks (node16 and bundler), and enqueues, drains into OpenFGA and redrives',
    async (client) => {
      const dir = join(tmp, `consumer-${client}`);
      mkdirSync(dir);
      // Its own user config: nothing from this machine's ~/.npmrc; the project's .npmrc names the registry.
      writeFileSync(join(tmp, `${client}.npmrc`), '');
      const consumerEnv = env({ npm_config_userconfig: join(tmp, `${client}.npmrc`) });
      const versions = Object.fromEntries(published.map((p) => [p.name, p.version]));
      await installConsumer(dir, client, registry.url, versions, consumerEnv);
      for (const [name, version] of Object.entries(versions)) expect(installedVersion(dir, name), name).toBe(version);
      if (client === 'npm') {
        const lock = JSON.parse(readFileSync(join(dir, 'package-lock.json'), 'utf8')) as {
          packages: Record<string, { resolved?: string }>;
        };
        for (const name of Object.keys(versions))
          expect(lock.packages[`node_modules/${name}`]?.resolved, name).toMatch(new RegExp(`^${registry.url}`));
      }

      // The installed bin (the shim in bin/ and the dist/ it imports) runs, and its help sends a
      // registry user to the documentation by address: no docs/ came with the package.
      const help = await installedBinHelp(dir, consumerEnv);
      expect(relativeFileMentions(help)).toEqual([]);
      const docs = urlsIn(help).filter((url) => url.startsWith(filesBase));
      expect(docs.length).toBeGreaterThan(0);
      for (const url of docs) expect(brokenRepositoryLink(scratch, filesBase, url)).toBeUndefined();

      const fgaConfig = openFgaClientConfig(fga.storeId, fga.authorizationModelId);
      const schema = `${client}_consumer`;
      const result = await typecheckAndRun(dir, {
        ...consumerEnv,
        DATABASE_URL: t.url,
        OUTBOX_SCHEMA: schema,
        OPENFGA_API_URL: fgaConfig.apiUrl,
        OPENFGA_STORE_ID: fga.storeId,
        OPENFGA_MODEL_ID: fga.authorizationModelId,
        ...(stackInfo().openfgaPresharedKey ? { OPENFGA_API_TOKEN: stackInfo().openfgaPresharedKey } : {}),
        UNREACHABLE_OPENFGA_URL: `http://127.0.0.1:${await freePort()}`,
      });
      expect(result).toEqual({
        delivered: 1,
        poisonedInOutage: 1,
        revived: [`vpc:${schema}-2`],
        redelivered: 1,
        tuples: [`user:alice owner vpc:${schema}-1`, `user:alice owner vpc:${schema}-2`],
      });
    },
    180_000,
  );
});
