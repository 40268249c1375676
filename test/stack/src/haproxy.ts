import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { accepts } from './pgbouncer.js';
import { StackError } from './stack-error.js';
import { waitFor } from './wait-for.js';
import { superviseProcess } from './supervised.js';

/** One frontend: where it listens, and the servers it balances over (round robin). */
export interface HaproxyFrontend {
  readonly name: string;
  /** `http` balances each request (OpenFGA's API); `tcp` each connection (Postgres: a plain proxy, sessions intact). */
  readonly mode: 'http' | 'tcp';
  readonly bind: { readonly host: string; readonly port: number };
  readonly servers: ReadonlyArray<{ readonly host: string; readonly port: number }>;
}

/** A running HAProxy. */
export interface Haproxy {
  stop(): Promise<void>;
}

/** The `haproxy` on PATH (scripts/bootstrap.sh extracts Debian's there), or a StackError saying how to get it. */
export function haproxyBinary(): string {
  if (spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).status !== 0) {
    throw new StackError(
      "haproxy is not on PATH: run `bash scripts/bootstrap.sh` (it extracts Debian's package into ~/.cache/outbox/debian/bin), or apt-get install haproxy",
    );
  }
  return 'haproxy';
}

/**
 * Starts HAProxy in the foreground with `frontends`, each server health-checked every 500 ms (a
 * dead OpenFGA replica leaves the rotation within a second), and waits until every frontend accepts.
 */
export async function startHaproxy(frontends: readonly HaproxyFrontend[]): Promise<Haproxy> {
  const bin = haproxyBinary();
  const dir = mkdtempSync(join(tmpdir(), 'outbox-haproxy-'));
  chmodSync(dir, 0o755);
  const config = join(dir, 'haproxy.cfg');
  const lines = ['defaults', '  timeout connect 2s', '  timeout client 1h', '  timeout server 1h'];
  for (const f of frontends) {
    lines.push(
      `frontend ${f.name}`,
      `  mode ${f.mode}`,
      `  bind ${f.bind.host}:${f.bind.port}`,
      `  default_backend ${f.name}_servers`,
      `backend ${f.name}_servers`,
      `  mode ${f.mode}`,
      '  balance roundrobin',
      ...f.servers.map((s, i) => `  server s${i} ${s.host}:${s.port} check inter 500ms fall 1 rise 1`),
    );
  }
  writeFileSync(config, `${lines.join('\n')}\n`);
  const server = superviseProcess(bin, ['-db', '-f', config], 'haproxy', dir);
  const stop = server.stop;
  try {
    for (const f of frontends) {
      await waitFor(`HAProxy's ${f.name} on ${f.bind.host}:${f.bind.port}`, () => accepts(f.bind.host, f.bind.port), {
        timeoutMs: 10_000,
        abortIf: () => (server.exited() ? `haproxy exited (${server.exited()}): ${server.stderr()}` : undefined),
      });
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { stop };
}
