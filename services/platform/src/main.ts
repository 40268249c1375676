// Runs all six services in one process, each on its own default port (iam 3000, vpc 3001, compute
// 3002, nlb 3003, storage 3004, registry 3005). Same environment as one service (services/README.md),
// without PORT. SIGTERM/SIGINT stop them gracefully; SIGHUP re-drives every outbox (model changed).
import { runServicesMain } from '@outbox/service-kit';
import { platformServices } from './index.js';

await runServicesMain(platformServices);
