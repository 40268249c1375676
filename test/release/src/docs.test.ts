// The documentation's promises that code can check: the README's example compiles against the
// packages, docs/architecture.md names every published package, and no Markdown link is broken.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, test } from 'vitest';
import { brokenBecause, codeBlocks, headingAnchors, linksOf, markdownFiles } from './markdown.js';
import { shellEnvironment } from './shell-environment.js';
import { typeErrorsOf } from './typecheck-snippet.js';
import { publicPackages, REPO_ROOT, workspacePackages } from './workspace.js';

const read = (file: string) => readFileSync(join(REPO_ROOT, file), 'utf8');

describe("the README's TypeScript example", () => {
  const blocks = codeBlocks(read('README.md'), 'ts');

  test('is one block, short enough to read at a glance', () => {
    expect(blocks).toHaveLength(1);
    expect((blocks[0] as string).split('\n').length).toBeLessThanOrEqual(40);
  });

  test('typechecks against the public packages, every name and option as exported', () => {
    expect(typeErrorsOf(REPO_ROOT, blocks[0] as string)).toEqual([]);
  }, 120_000);

  test('would fail to typecheck with an option the packages do not have', () => {
    const broken = (blocks[0] as string).replace('partitionColumn:', 'partitionKey:');
    expect(broken).not.toBe(blocks[0]);
    expect(typeErrorsOf(REPO_ROOT, broken).join('\n')).toMatch(/partitionKey/);
  }, 120_000);
});

describe('docs/architecture.md', () => {
  let published: string[];
  beforeAll(async () => {
    published = publicPackages(await workspacePackages(REPO_ROOT, shellEnvironment()))
      .map((p) => p.name)
      .sort();
  });
  const section = /^## Packages\n([\s\S]*?)(?=^## )/m.exec(read('docs/architecture.md'))?.[1] ?? '';
  const names = (text: string) => [...text.matchAll(/`(@outbox\/[a-z-]+)`/g)].map((m) => m[1] as string).sort();

  test('says which packages are published: exactly the public packages of the workspace', () => {
    const sentence = /are\s+published:\s*([^.]*)\./.exec(section)?.[1];
    expect(sentence, 'a sentence "… are published: `@outbox/…`, ….", in "## Packages"').toBeDefined();
    expect(published.length).toBeGreaterThan(0);
    expect(names(sentence as string)).toEqual(published);
  });

  test("its package table's rows for packages/* are the public packages", () => {
    const rows = section.split('\n').filter((line) => /^\| `@outbox\/[a-z-]+` \| `packages\//.test(line));
    expect(names(rows.map((row) => row.split('|')[1]).join(' '))).toEqual(published);
  });
});

describe('Markdown links', () => {
  const files = markdownFiles(REPO_ROOT);

  test('every Markdown file of the repository is read, the docs and READMEs among them', () => {
    expect(files).toEqual(
      expect.arrayContaining([
        'README.md',
        'docs/design.md',
        'docs/architecture.md',
        'packages/outbox/README.md',
        'services/README.md',
        '.changeset/README.md',
      ]),
    );
    expect(files.some((file) => file.includes('node_modules/'))).toBe(false);
  });

  test('every relative link names a file or folder that exists, and every #anchor a heading of it', () => {
    const links = files.flatMap((file) => linksOf(file, read(file)));
    expect(links.length).toBeGreaterThan(100);
    const broken = links.flatMap((link) => {
      const why = brokenBecause(REPO_ROOT, link);
      return why === undefined ? [] : [`${link.file}:${link.line}: (${link.target}) ${why}`];
    });
    expect(broken).toEqual([]);
  });

  test("anchors follow GitHub's slugs: punctuation dropped, spaces to hyphens, repeats numbered", () => {
    const anchors = headingAnchors(
      [
        '## 3. One spec per outbox table',
        '### A session against `pnpm demo --keep`',
        "## The services' fga:drain and pnpm migrate",
        '## The columns (migration `0009_ledger_life`)',
        '```sh',
        '# not a heading',
        '```',
        '## Runs',
        '## Runs',
      ].join('\n'),
    );
    expect([...anchors]).toEqual([
      '3-one-spec-per-outbox-table',
      'a-session-against-pnpm-demo---keep',
      'the-services-fgadrain-and-pnpm-migrate',
      'the-columns-migration-0009_ledger_life',
      'runs',
      'runs-1',
    ]);
  });

  test('a link to a missing file or heading is reported', () => {
    expect(brokenBecause(REPO_ROOT, { file: 'README.md', line: 1, target: 'docs/no-such-file.md' })).toMatch(
      /does not exist/,
    );
    expect(brokenBecause(REPO_ROOT, { file: 'docs/cli.md', line: 1, target: 'design.md#no-such-heading' })).toMatch(
      /no heading/,
    );
    expect(brokenBecause(REPO_ROOT, { file: 'docs/cli.md', line: 1, target: 'design.md#5-writer-and-drainer' })).toBe(
      undefined,
    );
  });
});
