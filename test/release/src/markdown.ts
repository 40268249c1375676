import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** Every Markdown file of the repository at `root` (tracked, or new and not ignored), relative to it. */
export function markdownFiles(root: string): string[] {
  const listed = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', '*.md'], {
    cwd: root,
    encoding: 'utf8',
  });
  // A tracked file deleted in the work tree is still listed by --cached.
  return [...new Set(listed.split('\n').filter((file) => file && existsSync(join(root, file))))].sort();
}

/** `markdown` without its fenced code blocks (each line blanked, so line numbers hold). */
function prose(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split('\n').map((line) => {
    const marker = /^\s*(```+|~~~+)/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) {
      fence = marker;
      return '';
    }
    if (fence !== undefined) {
      if (marker !== undefined && marker[0] === fence[0] && marker.length >= fence.length) fence = undefined;
      return '';
    }
    return line;
  });
}

/**
 * The anchors GitHub gives the headings of `markdown`: the heading's text as rendered (inline code
 * and emphasis markers dropped, a link's text kept), lower-cased, every character that is not a
 * letter, digit, space, `-` or `_` removed, spaces turned into `-`; a repeated slug gets `-1`, `-2`, ….
 */
export function headingAnchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of prose(markdown)) {
    const heading = /^#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = heading
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/[`*]/g, '')
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}_ -]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** One link of a Markdown file: where it is and what it points at, as written. */
export interface MarkdownLink {
  readonly file: string;
  readonly line: number;
  readonly target: string;
}

/** Every inline link, image and reference definition of `markdown` outside code. */
export function linksOf(file: string, markdown: string): MarkdownLink[] {
  const links: MarkdownLink[] = [];
  prose(markdown).forEach((text, index) => {
    // Inline code may hold brackets and parentheses that are no link.
    const line = text.replace(/(`+)[^`]*?\1/g, (code) => ' '.repeat(code.length));
    for (const match of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      links.push({ file, line: index + 1, target: match[1] as string });
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/.exec(line)?.[1];
    if (definition !== undefined) links.push({ file, line: index + 1, target: definition });
  });
  return links;
}

/**
 * Why a link of a file under `root` is broken, or undefined when it is not: a relative path must
 * name a file or folder of the repository, and a `#anchor` a heading of the Markdown file it names
 * (the link's own file when the path is empty). Links with a scheme (`https:`, `mailto:`) are not
 * checked here.
 */
export function brokenBecause(root: string, link: MarkdownLink): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) return undefined;
  const [path = '', anchor] = link.target.split('#', 2);
  const target = path === '' ? join(root, link.file) : resolve(root, dirname(link.file), decodeURIComponent(path));
  if (relative(root, target).startsWith('..')) return 'points outside the repository';
  if (!existsSync(target)) return `${relative(root, target)} does not exist`;
  if (anchor === undefined) return undefined;
  if (statSync(target).isDirectory() || !target.endsWith('.md')) return `#${anchor} on a file that is not Markdown`;
  if (!headingAnchors(readFileSync(target, 'utf8')).has(decodeURIComponent(anchor)))
    return `${relative(root, target)} has no heading #${anchor}`;
  return undefined;
}

/** The code blocks of `markdown` fenced with ```lang, in order. */
export function codeBlocks(markdown: string, lang: string): string[] {
  return [...markdown.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((m) => m[1] as string);
}
