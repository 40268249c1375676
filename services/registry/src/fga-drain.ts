// `pnpm --filter @outbox/service-registry fga:drain [--until-empty] [--json]`: `outbox drain` on the registry outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { registryService } from './index.js';

await runDrainOnceMain(registryService, process.env, process.argv.slice(2));
