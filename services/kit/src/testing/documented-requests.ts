// The requests the repository's Markdown shows (`curl … -d '{…}'`), read the way a shell and curl
// read them, and checked against a service's served OpenAPI document. Test-only.
import { Format } from 'typebox/format';
import { Value } from 'typebox/value';
import type { FormatCheck } from '../field-schemas.js';

/** A request a Markdown file shows with a JSON body. */
export interface DocumentedRequest {
  /** `README.md:125`. */
  readonly where: string;
  /** `POST`, `PUT`, `PATCH`. */
  readonly method: string;
  /** Where it is sent, as written: `$VPC`, `localhost:3001`. */
  readonly host: string;
  /** The path, placeholders as written: `/projects/<project>/grants/bob`. */
  readonly path: string;
  /** The body, its variables (`$PROJECT`) and placeholders (`<org>`) replaced by {@link PLACEHOLDER_ID}. */
  readonly body: unknown;
}

/** What a `$PROJECT` or `<org>` in a documented body stands for: an id every id field accepts. */
export const PLACEHOLDER_ID = '0b0e4f5c-3c2a-4f7e-9d1a-5e6f7a8b9c0d';

/** A shell line as words: single and double quotes, backslash escapes; `$VAR` kept as written; stops at `#`, `|`, `;`, `&`, `>`. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < line.length; i += 1) {
    const c = line[i] as string;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error(`unterminated ' in: ${line}`);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      word ??= '';
      for (i += 1; i < line.length && line[i] !== '"'; i += 1) {
        // In double quotes a backslash escapes only these; elsewhere it stays.
        if (line[i] === '\\' && '"\\$`'.includes(line[i + 1] ?? '')) i += 1;
        word += line[i];
      }
      if (i >= line.length) throw new Error(`unterminated " in: ${line}`);
    } else if (c === '\\') {
      i += 1;
      word = (word ?? '') + (line[i] ?? '');
    } else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (word === undefined && '#|;&>'.includes(c)) break;
    else word = (word ?? '') + c;
  }
  if (word !== undefined) words.push(word);
  return words;
}

/** curl's options that take a value, as the documentation uses them. */
const WITH_VALUE = new Set([
  '-X',
  '--request',
  '-H',
  '--header',
  '-o',
  '--output',
  '-w',
  '--write-out',
  '-u',
  '--user',
]);
const DATA = new Set(['-d', '--data', '--data-raw', '--data-binary', '--json']);

/**
 * Every `curl` command line of `text` (a Markdown file, `file` its name) that sends a JSON body:
 * continued lines joined, `$ ` prompts left out, the URL split into where it goes and its path.
 * A body that is not JSON once its placeholders are filled in throws, naming the line.
 *
 * @example
 * documentedRequests('README.md', readFileSync('README.md', 'utf8')); // [{ where: 'README.md:125', method: 'POST', host: '$VPC', path: '/vpcs', body: {…} }]
 */
export function documentedRequests(file: string, text: string): DocumentedRequest[] {
  const lines = text.split('\n');
  const requests: DocumentedRequest[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const start = i;
    let line = (lines[i] as string).trim().replace(/^\$ /, '');
    while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)} ${(lines[++i] as string).trim()}`;
    if (!line.startsWith('curl ')) continue;
    const words = shellWords(line).slice(1);
    let method: string | undefined;
    let data: string | undefined;
    let url: string | undefined;
    for (let w = 0; w < words.length; w += 1) {
      const word = words[w] as string;
      if (DATA.has(word)) data = words[++w];
      else if (word === '-X' || word === '--request') method = words[++w];
      else if (WITH_VALUE.has(word)) w += 1;
      else if (/^-X[A-Z]+$/.test(word)) method = word.slice(2);
      else if (/^-d./.test(word)) data = word.slice(2);
      else if (!word.startsWith('-')) url ??= word;
    }
    if (data === undefined || url === undefined) continue;
    const where = `${file}:${start + 1}`;
    const filled = data.replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[a-z][a-z_-]*>/g, PLACEHOLDER_ID);
    let body: unknown;
    try {
      body = JSON.parse(filled);
    } catch (error) {
      throw new Error(`${where}: the body is not JSON: ${filled} (${(error as Error).message})`, { cause: error });
    }
    const target = /^(?:https?:\/\/)?([^/]+)(\/.*)?$/.exec(url);
    requests.push({
      where,
      method: (method ?? 'POST').toUpperCase(),
      host: target?.[1] ?? url,
      path: (target?.[2] ?? '/').split('?')[0] as string,
      body,
    });
  }
  return requests;
}

/** The part of an OpenAPI 3 document {@link requestBodyProblems} reads. */
export interface OpenApiDocument {
  readonly paths: Readonly<
    Record<
      string,
      Readonly<Record<string, { readonly requestBody?: { readonly content?: Record<string, { schema?: unknown }> } }>>
    >
  >;
}

/**
 * What is wrong with sending `request` to the API `document` describes: no such route, no JSON
 * body there, or each way the body breaks the route's schema (checked by TypeBox's own validator,
 * with the service's custom `formats`). Empty: the documented request is one the API accepts.
 *
 * @example
 * expect(requestBodyProblems(await (await fetch(`${url}/openapi.json`)).json(), request, vpcService.formats)).toEqual([]);
 */
export function requestBodyProblems(
  document: OpenApiDocument,
  request: Pick<DocumentedRequest, 'method' | 'path' | 'body'>,
  formats: Readonly<Record<string, FormatCheck>> = {},
): string[] {
  const template = Object.keys(document.paths).find((t) =>
    new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}/?$`).test(request.path),
  );
  const operation = template === undefined ? undefined : document.paths[template]?.[request.method.toLowerCase()];
  if (!operation) return [`no route ${request.method} ${request.path} in the document`];
  const schema = operation.requestBody?.content?.['application/json']?.schema;
  if (schema === undefined) return [`${request.method} ${template} takes no JSON body`];
  for (const [name, check] of Object.entries(formats)) Format.Set(name, (value) => check(value) === undefined);
  return [...Value.Errors(schema as never, request.body)].map(
    (error) => `${request.method} ${template}: ${error.instancePath || 'the body'} ${error.message}`,
  );
}
