import { execFileSync, spawnSync } from 'node:child_process';

/** The run's network: a bridge in this namespace, and one namespace per host on it (docs/RELIABILITY.md, "Topology"). */
export interface TopologyNetwork {
  /** Where the hosts reach Postgres (PgBouncer, and the plain proxy LISTEN takes). */
  readonly postgresAddress: string;
  /** Where the hosts reach OpenFGA (HAProxy in front of the replicas). */
  readonly openfgaAddress: string;
  readonly hosts: ReadonlyArray<{ readonly name: string; readonly address: string }>;
  /** Runs `command` inside host `i`'s namespace (argv prefix), or as is without namespaces. */
  inHost(i: number, command: readonly string[]): string[];
  /** Cuts host `i` off from Postgres only (its packets to the Postgres address go nowhere), or restores it. */
  cutFromPostgres(i: number, cut: boolean): void;
  /** Takes host `i`'s link down or up. */
  link(i: number, up: boolean): void;
  /** Removes everything it made. Safe to call twice. */
  remove(): void;
}

const BRIDGE = 'outbox-br0';
const SUBNET = '10.213.0';
const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const quietly = (...args: string[]) => spawnSync('ip', args, { stdio: 'ignore' });

/**
 * `hosts` network namespaces (`outbox-h1`…) with a veth each to a bridge that has the Postgres and
 * OpenFGA addresses; addresses only on that bridge, gone at `remove()`. Undefined when this
 * machine refuses namespaces (not root, no `ip`): the caller falls back to loopback addresses.
 */
export function createNetwork(hosts: number): TopologyNetwork | undefined {
  const names = Array.from({ length: hosts }, (_, i) => `outbox-h${i + 1}`);
  const cleanUp = () => {
    for (const name of names) quietly('netns', 'del', name);
    quietly('link', 'del', BRIDGE);
  };
  if (process.getuid?.() !== 0 || spawnSync('ip', ['-V'], { stdio: 'ignore' }).status !== 0) return undefined;
  cleanUp(); // what a run killed before its end left
  try {
    ip('link', 'add', BRIDGE, 'type', 'bridge');
    ip('addr', 'add', `${SUBNET}.1/24`, 'dev', BRIDGE);
    ip('addr', 'add', `${SUBNET}.2/24`, 'dev', BRIDGE);
    ip('link', 'set', BRIDGE, 'up');
    names.forEach((name, i) => {
      ip('netns', 'add', name);
      ip('link', 'add', `outbox-v${i + 1}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name);
      ip('link', 'set', `outbox-v${i + 1}`, 'master', BRIDGE, 'up');
      ip('-n', name, 'addr', 'add', `${SUBNET}.${11 + i}/24`, 'dev', 'eth0');
      ip('-n', name, 'link', 'set', 'eth0', 'up');
      ip('-n', name, 'link', 'set', 'lo', 'up');
    });
  } catch {
    cleanUp();
    return undefined;
  }
  return {
    postgresAddress: `${SUBNET}.1`,
    openfgaAddress: `${SUBNET}.2`,
    hosts: names.map((name, i) => ({ name, address: `${SUBNET}.${11 + i}` })),
    inHost: (i, command) => ['ip', 'netns', 'exec', names[i] as string, ...command],
    cutFromPostgres(i, cut) {
      ip('-n', names[i] as string, 'route', cut ? 'add' : 'del', 'blackhole', `${SUBNET}.1/32`);
    },
    link(i, up) {
      ip('-n', names[i] as string, 'link', 'set', 'eth0', up ? 'up' : 'down');
    },
    remove: cleanUp,
  };
}

/** The loopback fallback: one address per host on lo, no faults of the network itself. */
export function loopbackNetwork(hosts: number): TopologyNetwork {
  return {
    postgresAddress: '127.0.0.1',
    openfgaAddress: '127.0.0.1',
    hosts: Array.from({ length: hosts }, (_, i) => ({ name: `loopback-${i + 1}`, address: `127.0.1.${i + 1}` })),
    inHost: (_i, command) => [...command],
    cutFromPostgres() {
      throw new Error('no namespaces: a host cannot be cut from Postgres');
    },
    link() {
      throw new Error('no namespaces: a host link cannot go down');
    },
    remove() {},
  };
}
