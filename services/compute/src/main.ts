// Runs the compute service as a process: see services/README.md for its environment.
import { runServiceMain } from '@outbox/service-kit';
import { computeService } from './index.js';

await runServiceMain(computeService);
