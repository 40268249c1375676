// Runs the vpc service as a process: see services/README.md for its environment.
import { runServiceMain } from '@outbox/service-kit';
import { vpcService } from './index.js';

await runServiceMain(vpcService);
