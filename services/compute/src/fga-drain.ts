// `pnpm --filter @outbox/service-compute fga:drain [--until-empty] [--json]`: `outbox drain` on the compute outbox (--help says more).
import { runDrainOnceMain } from '@outbox/service-kit';
import { computeService } from './index.js';

await runDrainOnceMain(computeService, process.env, process.argv.slice(2));
