import { afterAll } from 'vitest';
import { assertNoLeaks, installLeakGuard } from './leak-guard.js';

// Registered before the test file's own hooks, so it runs after them: whatever the file opened
// and did not close by then is a leak.
installLeakGuard();
afterAll(async () => {
  await assertNoLeaks();
});
