// What the release rehearsal lets two tarballs differ in: the order of dependency entries, nothing else.
import { expect, test } from 'vitest';
import { shippedPackage, type TarballContents } from './tarball.js';

const tarball = (manifest: Record<string, unknown>, readme = 'aa'): TarballContents => ({
  files: { 'package.json': JSON.stringify(manifest), 'README.md': readme },
  manifest,
});
const manifest = {
  name: '@outbox/cli',
  version: '0.1.0',
  dependencies: { commander: '^15.1.0', '@outbox/drainer': '^0.1.0', '@outbox/outbox': '^0.1.0' },
  peerDependencies: { kysely: '>=0.28 <0.30' },
};

test('two packs whose dependency maps list the same entries in another order ship the same package', () => {
  const reordered = {
    ...manifest,
    dependencies: { '@outbox/outbox': '^0.1.0', commander: '^15.1.0', '@outbox/drainer': '^0.1.0' },
  };
  expect(shippedPackage(tarball(reordered))).toEqual(shippedPackage(tarball(manifest)));
});

test('a different range, a missing entry, another order of the fields or another file is a different package', () => {
  const shipped = shippedPackage(tarball(manifest));
  const { peerDependencies, ...withoutPeers } = manifest;
  for (const other of [
    tarball({ ...manifest, dependencies: { ...manifest.dependencies, '@outbox/outbox': '^0.1.1' } }),
    tarball({ ...manifest, dependencies: { commander: '^15.1.0', '@outbox/drainer': '^0.1.0' } }),
    tarball({ peerDependencies, ...withoutPeers }),
    tarball(manifest, 'bb'),
  ]) {
    expect(shippedPackage(other)).not.toEqual(shipped);
  }
});
