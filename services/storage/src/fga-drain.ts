// `pnpm --filter @outbox/service-storage fga:drain [--until-empty] [--json]`: `outbox drain` on the storage outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { storageService } from './index.js';

await runDrainOnceMain(storageService, process.env, process.argv.slice(2));
