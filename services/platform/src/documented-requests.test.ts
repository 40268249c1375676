import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  documentedRequests,
  requestBodyProblems,
  serviceOptionsFor,
  type OpenApiDocument,
} from '@outbox/service-kit/testing';
import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { platformServices, startAllServices, type RunningPlatform } from './index.js';

// Every request body the repository's Markdown shows is one the service it is sent to accepts, by
// that service's own /openapi.json: a documented request cannot drift from the API.
const t = useTestDatabase();
const fga = useOpenFgaStore();
const REPO = fileURLToPath(new URL('../../..', import.meta.url));
const MARKDOWN = [
  'README.md',
  'services/README.md',
  ...readdirSync(join(REPO, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];
const requests = MARKDOWN.flatMap((file) => documentedRequests(file, readFileSync(join(REPO, file), 'utf8')));

let platform: RunningPlatform;
beforeAll(async () => {
  platform = await startAllServices(serviceOptionsFor(t, fga));
});
afterAll(async () => {
  await platform?.stop();
});

/** The service a documented request goes to: `$VPC` names it, `localhost:3001` by its default port. */
function serviceOf(host: string) {
  const port = /:(\d+)$/.exec(host)?.[1];
  return platformServices.find((s) =>
    host.startsWith('$') ? host.slice(1).toLowerCase() === s.name : Number(port) === s.defaultPort,
  );
}

test("the Markdown's requests are found: at least the README's vpc and bucket and the services README's four", () => {
  expect(requests.length, JSON.stringify(requests)).toBeGreaterThanOrEqual(6);
  const routes = requests.map((r) => `${serviceOf(r.host)?.name} ${r.method} ${r.path}`);
  expect(routes).toEqual(
    expect.arrayContaining([
      'vpc POST /vpcs',
      'storage POST /buckets',
      'iam POST /organizations',
      'iam POST /projects',
    ]),
  );
});

test("each documented body is valid for its route by the service's served /openapi.json", async () => {
  const documents = new Map<string, OpenApiDocument>();
  for (const service of platformServices) {
    const answer = await fetch(`${platform.urls[service.name]}/openapi.json`);
    documents.set(service.name, (await answer.json()) as OpenApiDocument);
  }
  const problems = requests.flatMap((request) => {
    const service = serviceOf(request.host);
    const document = service && documents.get(service.name);
    if (!service || !document) return [`${request.where}: no service is at ${request.host}`];
    return requestBodyProblems(document, request, service.formats).map((p) => `${request.where}: ${service.name} ${p}`);
  });
  expect(problems).toEqual([]);
});
