// Runs the registry service as a process: see services/README.md for its environment.
import { runServiceMain } from '@outbox/service-kit';
import { registryService } from './index.js';

await runServiceMain(registryService);
