// Runs the nlb service as a process: see services/README.md for its environment.
import { runServiceMain } from '@outbox/service-kit';
import { nlbService } from './index.js';

await runServiceMain(nlbService);
