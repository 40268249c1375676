// Runs all six services in one process, each on its own default port (iam 3000, vpc 3001, compute
// 3002, nlb 3003, storage 3004, registry 3005). Same environment as one service (services/README.md),
// without PORT. SIGTERM/SIGINT stop them gracefully; SIGHUP re-drives every outbox (model changed).
import { serviceOptionsFromEnv } from '@outbox/service-kit';
import { platformServices, startAllServices } from './index.js';

const { port: _ignored, ...options } = serviceOptionsFromEnv(0);
const overrides = Object.fromEntries(platformServices.map((s) => [s.name, { port: s.defaultPort }]));
const platform = await startAllServices({ ...options, overrides });
for (const [name, url] of Object.entries(platform.urls)) console.log(`${name.padEnd(8)} ${url}`);
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  platform.stop().then(() => process.exit(0), (error: unknown) => {
    console.error(`stop failed: ${String(error)}`);
    process.exit(1);
  });
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('SIGHUP', () => {
  for (const service of Object.values(platform.services)) void service.onModelChanged().catch((error: unknown) => console.error(`[${service.name}] redrive failed: ${String(error)}`));
});
