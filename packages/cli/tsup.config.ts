import { defineConfig } from 'tsup';
import { packageBuild } from '../../tsup.config.base.js';

// Two entries: the library (defineConfig, runOutboxCli) and the `outbox` bin.
export default defineConfig({ ...packageBuild, entry: ['src/index.ts', 'src/bin.ts'] });
