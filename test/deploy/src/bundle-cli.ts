// `node --import tsx test/deploy/src/bundle-cli.ts <dir>`: lays out the services image's /app in
// <dir> (scripts/build-images.sh runs it; image-bundle.test.ts checks what it makes).
import { bundleImageApp } from './image-bundle.js';

const [dir] = process.argv.slice(2);
if (!dir) {
  console.error('usage: bundle-cli.ts <dir>');
  process.exit(2);
}
const app = await bundleImageApp(dir);
console.log(`bundled ${app.entries.length} entries into ${app.dir}/dist (${app.assets.join(', ')} beside them)`);
