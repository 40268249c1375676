import { cpSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { mustRun } from './command.js';

const GIT_IDENTITY = [
  '-c',
  'user.name=release rehearsal',
  '-c',
  'user.email=rehearsal@example.invalid',
  '-c',
  'commit.gpgsign=false',
];

/**
 * Copies the repository at `root` into `dir` as its work tree is now — tracked and untracked files,
 * nothing git ignores (so no node_modules, no dist) — and makes the copy a git repository with one
 * commit, so the release flow runs on it exactly as on a clone (and can tag it).
 */
export async function copyRepository(root: string, dir: string, env: NodeJS.ProcessEnv): Promise<void> {
  const listed = await mustRun('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    env,
  });
  for (const file of listed.split('\0')) {
    // A tracked file deleted in the work tree is listed too: the copy has it deleted as well.
    if (file && existsSync(join(root, file))) cpSync(join(root, file), join(dir, file), { recursive: true });
  }
  await mustRun('git', ['init', '--quiet', '--initial-branch=main'], { cwd: dir, env });
  await commitAll(dir, 'the repository as the rehearsal found it', env);
}

/** `git add -A && git commit`, as the flow's "commit the version bump" step. */
export async function commitAll(dir: string, message: string, env: NodeJS.ProcessEnv): Promise<void> {
  await mustRun('git', ['add', '--all'], { cwd: dir, env });
  await mustRun('git', [...GIT_IDENTITY, 'commit', '--quiet', '--no-verify', '--message', message], { cwd: dir, env });
}
