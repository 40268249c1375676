// `pnpm --filter @outbox/service-storage fga:drain`: one drain pass of the storage outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { storageService } from './index.js';

await runDrainOnceMain(storageService);
