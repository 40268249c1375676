// `pnpm --filter @outbox/service-nlb fga:drain [--until-empty] [--json]`: `outbox drain` on the nlb outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { nlbService } from './index.js';

await runDrainOnceMain(nlbService, process.env, process.argv.slice(2));
