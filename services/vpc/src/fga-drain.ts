// `pnpm --filter @outbox/service-vpc fga:drain [--until-empty] [--json]`: `outbox drain` on the vpc outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { vpcService } from './index.js';

await runDrainOnceMain(vpcService, process.env, process.argv.slice(2));
