// Links in what a package ships (its README, the CLI's help), read independently of how the prepack
// writes them (scripts/release-readme.ts), so the tests can tell whether they work for a registry user.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The lines of `markdown` outside fenced code blocks (a code sample's brackets are no links). */
function proseLines(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const marker = /^\s{0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence) {
      if (marker?.startsWith(fence)) fence = undefined;
    } else if (marker) fence = marker;
    else lines.push(line);
  }
  return lines;
}

/** Every link target of `markdown`: inline links and images, reference definitions, HTML href and src. */
export function linkTargets(markdown: string): string[] {
  const text = proseLines(markdown).join('\n');
  return [
    ...[...text.matchAll(/\]\(\s*<?([^)\s>]+)/g)].map((m) => m[1]!),
    ...[...text.matchAll(/^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)/gm)].map((m) => m[1]!),
    ...[...text.matchAll(/\b(?:href|src)=["']([^"']*)["']/g)].map((m) => m[1]!),
  ];
}

/** A target that names its place by itself (a scheme, or `//host`); `#anchor` is this page's own. */
export function isAbsoluteUrl(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');
}

/** The anchors a repository host gives `markdown`'s headings (GitHub's rule), and its explicit ids. */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(markdown)) {
    for (const m of line.matchAll(/\b(?:id|name)=["']([^"']+)["']/g)) anchors.add(m[1]!);
    const heading = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/**
 * Why `url`, an address in the repository at `root` (`<base><path>#anchor`, `base` being where the
 * repository's files are shown), leads nowhere; undefined when the file exists and, for a Markdown
 * file, has the anchor.
 */
export function brokenRepositoryLink(root: string, base: string, url: string): string | undefined {
  if (!url.startsWith(base)) return `${url} is not under ${base}`;
  const [path = '', anchor] = url.slice(base.length).split('#');
  const file = join(root, path);
  if (!existsSync(file)) return `${url}: the repository has no ${path}`;
  if (anchor && (statSync(file).isDirectory() || !path.endsWith('.md')))
    return `${url}: an anchor in something that is not a Markdown file`;
  if (anchor && !headingAnchors(readFileSync(file, 'utf8')).has(decodeURIComponent(anchor)))
    return `${url}: ${path} has no heading #${anchor}`;
  return undefined;
}

/**
 * The words of a plain text (a command's --help) that name a repository file by a relative path
 * (`docs/cli.md`, `../design.md#x`): a registry user has no such file. Words inside a URL are fine.
 */
export function relativeFileMentions(text: string): string[] {
  return (text.match(/\S*(?:\bdocs\/|\.md\b)\S*/g) ?? []).filter((word) => !/[a-z][a-z0-9+.-]*:\/\//i.test(word));
}

/** Every http(s) URL in a plain text, without the punctuation that ends its sentence. */
export function urlsIn(text: string): string[] {
  return (text.match(/https?:\/\/[^\s"'<>]+/g) ?? []).map((url) => url.replace(/[),.;:]+$/, ''));
}
