// `pnpm --filter @outbox/service-registry fga:drain`: one drain pass of the registry outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { registryService } from './index.js';

await runDrainOnceMain(registryService);
