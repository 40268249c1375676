// `pnpm --filter @outbox/service-nlb fga:drain`: one drain pass of the nlb outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { nlbService } from './index.js';

await runDrainOnceMain(nlbService);
