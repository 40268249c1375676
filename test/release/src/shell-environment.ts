import { dirname } from 'node:path';
import { REPO_ROOT } from './workspace.js';

/**
 * This process's environment as a user's shell would have it: without what vitest and pnpm's script
 * runner add (NODE_OPTIONS, npm_* settings, the repository's node_modules/.bin on PATH), so that a
 * command behaves as it would for someone typing it, and the repository's setup cannot leak into it.
 */
export function shellEnvironment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(npm_|pnpm_(config|script|package)|vitest|node_options$|node_env$|test$|init_cwd$|force_tty$)/i.test(key))
      env[key] = value;
  }
  const path = (process.env.PATH ?? '').split(':').filter((dir) => dir && !dir.startsWith(REPO_ROOT));
  // The node running this test first: the commands need Node >= 22.12, and the npm beside it.
  env.PATH = [dirname(process.execPath), ...path].join(':');
  return env;
}
