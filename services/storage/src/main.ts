// Runs the storage service as a process: see services/README.md for its environment.
import { runServiceMain } from '@outbox/service-kit';
import { storageService } from './index.js';

await runServiceMain(storageService);
