// Runs the iam service as a process: see services/README.md. SIGHUP = the authorization model changed.
import { runServiceMain } from '@outbox/service-kit';
import { iamService } from './index.js';

await runServiceMain(iamService);
