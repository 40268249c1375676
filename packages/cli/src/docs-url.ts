// The build inlines this JSON (esbuild bundles it), so the bin reads no file for it at run time, and
// a consumer who bundles the package again keeps it too.
import manifest from '../package.json' with { type: 'json' };

/**
 * Where a registry user reads the repository's `docs/<page>` (e.g. `design.md#2-vocabulary`): the
 * tarball has no docs/, so help texts name pages by address. Built from this package's `homepage`,
 * the root package.json's (docs/releasing.md), as the prepack builds the shipped README's links.
 */
export function docsUrl(page: string): string {
  return `${manifest.homepage}/blob/main/docs/${page}`;
}
