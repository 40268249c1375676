import { createInterface } from 'node:readline/promises';
import type { CliIo } from './cli-io.js';

/**
 * Asks `question` on the terminal and resolves true only for an explicit yes (`y`, `yes`). Only
 * called when stdin is a terminal; the caller refuses otherwise.
 */
export async function confirm(io: CliIo, question: string): Promise<boolean> {
  const rl = createInterface({ input: io.stdin, output: io.stderr, terminal: true });
  try {
    const answer = await rl.question(`${question} [y/N] `);
    return /^(y|yes)$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
