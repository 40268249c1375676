// The links in what the public packages ship — each README as the prepack rewrites it, the CLI's
// help — checked against the repository without packing anything (the release rehearsal,
// release.test.ts, checks the published tarballs and the installed bin).
import { readFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { join } from 'node:path';
import { runOutboxCli } from '@outbox/cli';
import { beforeAll, describe, expect, test } from 'vitest';
import { absoluteLinks, projectHomepage, repositoryFileUrl } from '../../../scripts/release-readme.js';
import {
  brokenRepositoryLink,
  headingAnchors,
  isAbsoluteUrl,
  linkTargets,
  relativeFileMentions,
  urlsIn,
} from './markdown-links.js';
import { shellEnvironment } from './shell-environment.js';
import { publicPackages, readManifest, REPO_ROOT, workspacePackages, type WorkspacePackage } from './workspace.js';

const homepage = readManifest(REPO_ROOT).homepage as string;
/** Where the repository's files are shown: every link into the repository starts with it. */
const filesBase = repositoryFileUrl(homepage, '');

let published: WorkspacePackage[];
beforeAll(async () => {
  published = publicPackages(await workspacePackages(REPO_ROOT, shellEnvironment()));
});

describe('the README a package ships', () => {
  test('links only to absolute addresses or its own anchors, and each address into the repository finds its file and heading', () => {
    expect(projectHomepage()).toBe(homepage);
    expect(published.length).toBeGreaterThan(0);
    let intoRepository = 0;
    for (const p of published) {
      const shipped = absoluteLinks(readFileSync(join(p.dir, 'README.md'), 'utf8'), p.path, homepage);
      for (const target of linkTargets(shipped)) {
        if (target.startsWith('#')) {
          expect(headingAnchors(shipped), `${p.name} README: ${target}`).toContain(target.slice(1));
          continue;
        }
        expect(isAbsoluteUrl(target), `${p.name} README: ${target}`).toBe(true);
        if (target.startsWith(filesBase)) {
          intoRepository++;
          expect(brokenRepositoryLink(REPO_ROOT, filesBase, target), `${p.name} README`).toBeUndefined();
        }
      }
    }
    // The READMEs link into docs/ today: a rewrite that dropped the links would pass the loop above.
    expect(intoRepository).toBeGreaterThan(0);
  });

  test("makes each relative link the address of its target in the repository, from the package's folder", () => {
    const readme = [
      'See [the manual](../../docs/cli.md#json-output), [the root](/README.md) and ![a figure](./figure.png "title").',
      '[design]: ../../docs/design.md',
      '<a href="../outbox/README.md">outbox</a> · [this page](#usage) · [elsewhere](https://example.invalid/x)',
      '```md',
      '[in a code block](../../docs/cli.md)',
      '```',
    ].join('\n');
    expect(absoluteLinks(readme, 'packages/cli', 'https://git.example.invalid/outbox/').split('\n')).toEqual([
      'See [the manual](https://git.example.invalid/outbox/blob/main/docs/cli.md#json-output), ' +
        '[the root](https://git.example.invalid/outbox/blob/main/README.md) and ' +
        '![a figure](https://git.example.invalid/outbox/blob/main/packages/cli/figure.png "title").',
      '[design]: https://git.example.invalid/outbox/blob/main/docs/design.md',
      '<a href="https://git.example.invalid/outbox/blob/main/packages/outbox/README.md">outbox</a> · [this page](#usage) · ' +
        '[elsewhere](https://example.invalid/x)',
      '```md',
      '[in a code block](../../docs/cli.md)',
      '```',
    ]);
    expect(() => absoluteLinks('[x](../../../elsewhere.md)', 'packages/cli', homepage)).toThrow(
      /outside the repository/,
    );
  });
});

/** What `outbox <args>` prints on stdout, run from the sources (the rehearsal runs the installed bin). */
async function outboxOutput(args: string[]): Promise<string> {
  let text = '';
  const stdout = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString();
      done();
    },
  });
  const io = { stdout, stderr: stdout, stdin: process.stdin, env: {}, cwd: REPO_ROOT };
  expect(await runOutboxCli(args, { io }), `outbox ${args.join(' ')}`).toBe(0);
  return text;
}

test("the CLI's help names the documentation by absolute address, each finding its file and heading", async () => {
  const main = await outboxOutput(['--help']);
  const commands = [...main.matchAll(/^ {2}([a-z]+)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  expect(commands).toEqual(expect.arrayContaining(['status', 'redrive', 'audit', 'doctor']));
  const texts = [main, ...(await Promise.all(commands.map((c) => outboxOutput([c, '--help']))))].join('\n');
  expect(relativeFileMentions(texts)).toEqual([]);
  const urls = urlsIn(texts).filter((url) => url.startsWith(homepage));
  expect(urls.length).toBeGreaterThan(0);
  for (const url of urls) {
    expect(url.startsWith(`${filesBase}docs/`), `${url}: the address a shipped README gives the same page`).toBe(true);
    expect(brokenRepositoryLink(REPO_ROOT, filesBase, url)).toBeUndefined();
  }
});
