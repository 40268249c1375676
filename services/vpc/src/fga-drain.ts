// `pnpm --filter @outbox/service-vpc fga:drain`: one drain pass of the vpc outbox, printing what it delivered.
import { runDrainOnceMain } from '@outbox/service-kit';
import { vpcService } from './index.js';

await runDrainOnceMain(vpcService);
