import { Type } from 'typebox';
import { describe, expect, test } from 'vitest';
import { documentedRequests, PLACEHOLDER_ID, requestBodyProblems } from './testing/documented-requests.js';

// The reader behind the test of the Markdown's requests (services/platform): it must read what a
// shell and curl read, and its check must refuse what the API refuses.
const MARKDOWN = [
  '```sh',
  `curl -s -o /dev/null -w '%{http_code}\\n' -X POST $VPC/vpcs -H 'x-user-id: alice' -d "{\\"project_id\\":\\"$PROJECT\\",\\"name\\":\\"db-net\\"}"`,
  'curl -s -XPUT localhost:3000/projects/<project>/grants/bob -H \'x-user-id: alice\' -d \'{"relations":["viewer"]}\'',
  '$ curl -s http://127.0.0.1:3004/buckets \\',
  '    -H \'x-user-id: alice\' --data \'{"project_id":"<project>","name":"b"}\'  # a comment',
  "curl -s localhost:3001/vpcs/<vpc> -H 'x-user-id: bob'",
  '```',
].join('\n');

describe('documented requests', () => {
  test('are read as the shell reads them: quotes, escapes, continued lines, variables and placeholders filled in', () => {
    expect(documentedRequests('X.md', MARKDOWN)).toEqual([
      {
        where: 'X.md:2',
        method: 'POST',
        host: '$VPC',
        path: '/vpcs',
        body: { project_id: PLACEHOLDER_ID, name: 'db-net' },
      },
      {
        where: 'X.md:3',
        method: 'PUT',
        host: 'localhost:3000',
        path: '/projects/<project>/grants/bob',
        body: { relations: ['viewer'] },
      },
      {
        where: 'X.md:4',
        method: 'POST',
        host: '127.0.0.1:3004',
        path: '/buckets',
        body: { project_id: PLACEHOLDER_ID, name: 'b' },
      },
    ]);
  });

  test('a body that is not JSON names its line', () => {
    expect(() => documentedRequests('Y.md', "\ncurl -X POST $VPC/vpcs -d '{name: 1}'")).toThrow(
      /^Y\.md:2: the body is not JSON/,
    );
  });

  test('the check refuses an unknown route, a missing or unknown field, and a value its format refuses', () => {
    const schema = Type.Object(
      { name: Type.String(), cidr: Type.Optional(Type.String({ format: 'cidr' })) },
      { additionalProperties: false },
    );
    const document = {
      paths: { '/things/{id}': { put: { requestBody: { content: { 'application/json': { schema } } } } } },
    };
    const check = (method: string, path: string, body: unknown) =>
      requestBodyProblems(document, { method, path, body }, { cidr: (v) => (v.includes('/') ? undefined : 'no /') });
    expect(check('PUT', '/things/1', { name: 'a', cidr: '10.0.0.0/8' })).toEqual([]);
    expect(check('POST', '/things/1', {})).toEqual(['no route POST /things/1 in the document']);
    expect(check('PUT', '/things/1', { nme: 'a' })).toEqual(
      expect.arrayContaining([
        'PUT /things/{id}: the body must have required properties name',
        'PUT /things/{id}: the body must not have additional properties',
      ]),
    );
    expect(check('PUT', '/things/1', { name: 'a', cidr: '10.0.0.0' })).toEqual([
      'PUT /things/{id}: /cidr must match format "cidr"',
    ]);
  });
});
