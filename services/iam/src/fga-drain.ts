// `pnpm --filter @outbox/service-iam fga:drain`: one drain pass of iam.fga_outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { iamService } from './index.js';

await runDrainOnceMain(iamService);
