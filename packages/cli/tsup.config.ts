import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.config.base.js';

// The exports' entries, plus the `outbox` bin.
export default defineConfig(() => {
  const base = packageBuild();
  return { ...base, entry: [...(base.entry as string[]), 'src/bin.ts'] };
});
