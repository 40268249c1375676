// `pnpm --filter @outbox/service-compute fga:drain`: one drain pass of the compute outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { computeService } from './index.js';

await runDrainOnceMain(computeService);
