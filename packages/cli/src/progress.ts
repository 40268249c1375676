import type { CliIo } from './cli-io.js';

/** A progress line a long command redraws on stderr. */
export interface Progress {
  update(done: number, total: number | undefined, note?: string): void;
  /** Clears the line (the summary follows on stdout). */
  end(): void;
}

const NO_PROGRESS: Progress = { update: () => undefined, end: () => undefined };
const WIDTH = 24;
/** At most one redraw this often: a fast drain must not spend its time painting. */
const REDRAW_MS = 100;

/**
 * A progress bar on stderr — only when stderr is a terminal and the output is not --json, so that
 * logs, pipes and scripts never see it.
 *
 * @example
 * const bar = progress(io, 'vpc', options.json);
 * bar.update(delivered, total); … bar.end();
 */
export function progress(io: CliIo, label: string, json: boolean | undefined): Progress {
  if (json || !io.stderr.isTTY) return NO_PROGRESS;
  let last = 0;
  let drawn = false;
  return {
    update(done, total, note = '') {
      const now = Date.now();
      if (now - last < REDRAW_MS) return;
      last = now;
      drawn = true;
      const bar =
        total === undefined || total === 0
          ? ''
          : `[${'#'.repeat(Math.min(WIDTH, Math.round((done / total) * WIDTH))).padEnd(WIDTH, '.')}] `;
      io.stderr.write(`\r\x1b[K${label} ${bar}${done}${total === undefined ? '' : `/${total}`} ${note}`);
    },
    end() {
      if (drawn) io.stderr.write('\r\x1b[K');
    },
  };
}
