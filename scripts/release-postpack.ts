// The `postpack` of every public package (`node --import tsx ../../scripts/release-postpack.ts`, run
// in the package's folder after npm or pnpm packed it): puts back the README the prepack swapped for
// the one to ship (release-readme.ts), so packing leaves the work tree as it found it.
import { restoreReadme } from './release-readme.js';

restoreReadme(process.cwd());
