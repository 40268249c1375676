import { ensureOpenFgaBinary } from './openfga-binary.js';
import { startStack } from './stack.js';

/**
 * `pnpm stack`: starts Postgres + OpenFGA in the foreground, prints their URLs, and stops both
 * on Ctrl-C (SIGINT) or SIGTERM. `pnpm stack:install` only makes sure the OpenFGA binary exists.
 */
async function main(): Promise<void> {
  if (process.argv.includes('--install-only')) {
    const bin = await ensureOpenFgaBinary({ log: (line) => console.log(line) });
    console.log(`openfga: ${bin}`);
    return;
  }
  const datastore = process.argv.includes('--openfga-postgres') ? 'postgres' : 'memory';
  const stack = await startStack({ openfgaDatastore: datastore });
  console.log(`postgres  ${stack.postgresUrl}   (${stack.sources.postgres})`);
  console.log(`openfga   ${stack.openfga.apiUrl}   (${stack.sources.openfga}, ${datastore} datastore)`);
  console.log('Ctrl-C stops both.');
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`\n${signal}: stopping…`);
    await stack.stop();
    console.log('stopped.');
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  setInterval(() => undefined, 1 << 30);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? `${error.name}: ${error.message}` : error);
  if (error instanceof Error && error.cause) console.error('cause:', error.cause);
  process.exit(1);
});
