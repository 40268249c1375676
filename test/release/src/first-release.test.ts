// The pending changesets against the public packages, read without running changesets (the release
// rehearsal, release.test.ts, runs `changeset version` and checks the versions it gives).
import { beforeAll, expect, test } from 'vitest';
import { highestBumps, pendingChangesets } from './changesets.js';
import { shellEnvironment } from './shell-environment.js';
import { publicPackages, REPO_ROOT, workspacePackages, type WorkspacePackage } from './workspace.js';

let published: WorkspacePackage[];
beforeAll(async () => {
  published = publicPackages(await workspacePackages(REPO_ROOT, shellEnvironment()));
});

test('every public package not released yet (at 0.0.0) gets a minor from the pending changesets: its first release is 0.1.0', () => {
  expect(published.length).toBeGreaterThan(0);
  const bumps = highestBumps(pendingChangesets(REPO_ROOT));
  // A package left out is released only as a dependent of one that is in them (updateInternalDependencies:
  // a patch), with an empty changelog — 0.0.1 beside the others' 0.1.0 — or not at all.
  for (const p of published.filter((q) => q.version === '0.0.0'))
    expect(bumps.get(p.name), `${p.name} (at 0.0.0) in .changeset/*.md`).toBe('minor');
});

test('the changesets name only public packages, and each summary names every package it bumps when it bumps several', () => {
  const names = published.map((p) => p.name);
  for (const changeset of pendingChangesets(REPO_ROOT)) {
    for (const name of changeset.releases.keys()) expect(names, `.changeset/${changeset.file}`).toContain(name);
    // Each package's changelog gets the whole summary: with several packages, it must say which part is whose.
    if (changeset.releases.size > 1)
      for (const name of changeset.releases.keys())
        expect(changeset.summary, `.changeset/${changeset.file} says nothing about ${name}`).toContain(`\`${name}\``);
  }
});
