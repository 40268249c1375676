// `pnpm --filter @outbox/service-iam fga:drain [--until-empty] [--json]`: `outbox drain` on iam.fga_outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { iamService } from './index.js';

await runDrainOnceMain(iamService, process.env, process.argv.slice(2));
