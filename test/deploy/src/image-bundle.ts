import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { platformServices } from '@outbox/platform';
import { build } from 'esbuild';

/** The repository's root. */
export const REPO = fileURLToPath(new URL('../../..', import.meta.url));

/**
 * What the services image runs, by the name its first argument gives (deploy/image/outbox-image):
 * each service, its one drain pass (`<name>-drain`, = `outbox drain` on its outbox), the
 * one-process platform, `pnpm migrate` and the `outbox` command line. Source paths from the root.
 */
export function imageEntries(): Record<string, string> {
  const entries: Record<string, string> = {};
  for (const { name } of platformServices) {
    entries[name] = `services/${name}/src/main.ts`;
    entries[`${name}-drain`] = `services/${name}/src/fga-drain.ts`;
  }
  entries.platform = 'services/platform/src/main.ts';
  entries.migrate = 'migrations/src/cli.ts';
  entries.outbox = 'packages/cli/src/bin.ts';
  return entries;
}

/** Files a source reads beside itself: `new URL('./sql/x.sql', import.meta.url)`. */
const SIBLING_FILE = /new URL\(\s*(['"])(\.{1,2}\/[^'"]+)\1\s*,\s*import\.meta\.url\s*\)/g;

/** What {@link bundleImageApp} wrote. */
export interface ImageApp {
  /** The directory laid out as the image's /app: dist/*.mjs, the files they read, `entries`. */
  readonly dir: string;
  /** The entry names, as `entries` lists them. */
  readonly entries: readonly string[];
  /** The files copied beside the bundle, relative to `dir` (the SQL the packages read, the model). */
  readonly assets: readonly string[];
}

/**
 * Bundles every {@link imageEntries} entry into `dir/dist/<name>.mjs` (ESM, shared code in chunks
 * beside them, so one module instance per process whatever the entry), with every dependency
 * inside: the image needs node and nothing else — no pnpm, no tsx, no node_modules.
 *
 * The sources read a few files relative to themselves (the outbox's SQL functions, the
 * authorization model). The chunks that hold that code all sit in `dist/`, so each such file is
 * copied to the same relative place from `dist/`; two sources naming one place with different
 * files fail the build.
 */
export async function bundleImageApp(dir: string): Promise<ImageApp> {
  rmSync(dir, { recursive: true, force: true });
  const outdir = join(dir, 'dist');
  const entries = imageEntries();
  const result = await build({
    absWorkingDir: REPO,
    entryPoints: entries,
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    // The workspace's packages export their TypeScript under this condition (tsconfig.base.json).
    conditions: ['@outbox/source'],
    outExtension: { '.js': '.mjs' },
    metafile: true,
    logLevel: 'error',
    legalComments: 'none',
    // The CommonJS dependencies (pg, pino, …) call require() for Node's own modules: an ES module
    // has no require of its own.
    banner: {
      js: "import { createRequire as __outboxCreateRequire } from 'node:module'; const require = __outboxCreateRequire(import.meta.url);",
    },
  });
  const copied = new Map<string, string>();
  for (const input of Object.keys(result.metafile.inputs)) {
    const source = resolve(REPO, input);
    if (!/\.[cm]?[jt]s$/.test(source) || !existsSync(source)) continue;
    for (const match of readFileSync(source, 'utf8').matchAll(SIBLING_FILE)) {
      const from = resolve(dirname(source), match[2] as string);
      const to = resolve(outdir, match[2] as string);
      if (!existsSync(from)) throw new Error(`${input} reads ${match[2]}, which does not exist at ${from}`);
      const earlier = copied.get(to);
      if (earlier !== undefined && earlier !== from)
        throw new Error(`${relative(dir, to)} is read as two files: ${earlier} and ${from}`);
      copied.set(to, from);
    }
  }
  for (const [to, from] of copied) {
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(from, to);
  }
  const names = Object.keys(entries);
  writeFileSync(join(dir, 'entries'), `${names.join('\n')}\n`);
  return { dir, entries: names, assets: [...copied.keys()].map((to) => relative(dir, to)).sort() };
}
