// `pnpm topology [--short] [--seed N]`: the platform as platform teams run it, on this machine
// (docs/RELIABILITY.md, "Topology"): three hosts as network namespaces, each running a replica of
// every service (drainer and reconciler in process); one Postgres behind PgBouncer in transaction
// mode; two OpenFGA replicas on one postgres datastore, check cache on, behind HAProxy. Load through
// the services' APIs on every host, faults on a seeded schedule, then the checks.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { OpenFgaClient } from '@openfga/sdk';
import { authorizationModel, iamOutbox, migrateToLatest, vpcOutbox } from '@outbox/migrations';
import { outboxStats } from '@outbox/outbox';
import {
  createDatabase,
  createOpenFgaStore,
  freePort,
  startHaproxy,
  startNativeOpenFga,
  startPgBouncer,
  startStack,
  type Haproxy,
  type OpenFgaServer,
  type PgBouncer,
} from '@outbox/test-stack';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { checkDrift } from '../chaos/drift.js';
import { findOrderViolations } from '../chaos/order-violations.js';
import { seededRandom, type Random } from '../chaos/seeded-random.js';
import { createNetwork, loopbackNetwork, type TopologyNetwork } from './network.js';
import { overlappingWrites, startWriteRecorder, type WriteRecorder } from './write-recorder.js';

const HOSTS = 3;
const say = (line: string) => console.error(`[topology] ${line}`);

interface Options {
  readonly seed: number;
  readonly durationS: number;
  readonly cutS: number;
  readonly concurrency: number;
}

function options(): Options {
  const { values } = parseArgs({
    options: { short: { type: 'boolean' }, seed: { type: 'string' }, duration: { type: 'string' } },
  });
  const short = values.short === true;
  return {
    seed: values.seed === undefined ? Math.floor(Math.random() * 1_000_000) : Number(values.seed),
    durationS: values.duration === undefined ? (short ? 30 : 600) : Number(values.duration),
    cutS: short ? 5 : 30,
    concurrency: short ? 6 : 12,
  };
}

/** One host's platform process (all six services), started in its namespace. */
class HostProcess {
  child: ChildProcess | undefined;
  output = '';
  constructor(
    readonly index: number,
    private readonly command: readonly string[],
    private readonly env: NodeJS.ProcessEnv,
  ) {}
  start(): void {
    const [bin, ...args] = this.command;
    this.child = spawn(bin as string, args, { env: this.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (c: Buffer) => (this.output = (this.output + c.toString()).slice(-400_000));
    this.child.stdout?.on('data', keep);
    this.child.stderr?.on('data', keep);
  }
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }
}

const SERVICE_PORTS = { iam: 3000, vpc: 3001 } as const;

async function ready(address: string, deadlineMs: number): Promise<void> {
  for (const deadline = Date.now() + deadlineMs; ; await sleep(200)) {
    const ok = await Promise.all(
      Object.values(SERVICE_PORTS).map((port) =>
        fetch(`http://${address}:${port}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
          (r) => r.ok,
          () => false,
        ),
      ),
    );
    if (ok.every(Boolean)) return;
    if (Date.now() > deadline) throw new Error(`the services on ${address} are not ready after ${deadlineMs} ms`);
  }
}

async function call(address: string, port: number, method: string, path: string, body?: unknown) {
  try {
    const response = await fetch(`http://${address}:${port}${path}`, {
      method,
      headers: { 'x-user-id': 'alice', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(20_000),
    });
    return { status: response.status, body: (await response.json().catch(() => ({}))) as { id?: string } };
  } catch {
    return { status: 0, body: {} as { id?: string } };
  }
}

async function main(): Promise<number> {
  const opts = options();
  const random: Random = seededRandom(opts.seed);
  say(`seed ${opts.seed}, ${opts.durationS} s of load and faults`);
  const network = createNetwork(HOSTS);
  if (!network)
    say(
      'this machine refuses network namespaces (not root, or no `ip`): one loopback address per host, no network faults',
    );
  const net: TopologyNetwork = network ?? loopbackNetwork(HOSTS);
  const hosts: HostProcess[] = [];
  const replicas: OpenFgaServer[] = [];
  let bouncer: PgBouncer | undefined;
  let balancer: Haproxy | undefined;
  let recorder: WriteRecorder | undefined;
  const stack = await startStack({ openfgaDatastore: 'memory', fastPostgres: false });
  try {
    const url = await createDatabase(stack.postgresUrl, 'topology');
    const datastoreUri = await createDatabase(stack.postgresUrl, 'topology_openfga');
    const direct = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 4 }) }),
    });
    await migrateToLatest(direct);
    for (let i = 0; i < 2; i += 1)
      replicas.push(await startNativeOpenFga({ datastore: 'postgres', datastoreUri, checkCacheTtlMs: 10_000 }));
    const [openfgaPort, balancerPort, listenPort] = [await freePort(), await freePort(), await freePort()];
    const pgPort = Number(new URL(url).port);
    balancer = await startHaproxy([
      {
        name: 'openfga',
        mode: 'http',
        bind: { host: '127.0.0.1', port: balancerPort },
        servers: replicas.map((r) => ({ host: '127.0.0.1', port: r.httpPort })),
      },
      // LISTEN's way to Postgres itself: a plain TCP proxy keeps the session.
      {
        name: 'postgres',
        mode: 'tcp',
        bind: { host: net.postgresAddress, port: listenPort },
        servers: [{ host: '127.0.0.1', port: pgPort }],
      },
    ]);
    // The hosts reach HAProxy through the recorder, which notes every Write's flight.
    recorder = await startWriteRecorder(
      { host: net.openfgaAddress, port: openfgaPort },
      { host: '127.0.0.1', port: balancerPort },
    );
    const openfgaUrl = `http://${net.openfgaAddress}:${openfgaPort}`;
    const balancerUrl = `http://127.0.0.1:${balancerPort}`;
    const { storeId, authorizationModelId } = await createOpenFgaStore(balancerUrl, {
      authorizationModel: authorizationModel(),
    });
    const startBouncer = async (port?: number) =>
      startPgBouncer({
        postgresUrl: url,
        poolMode: 'transaction',
        poolSize: 10,
        listenAddress: net.postgresAddress,
        ...(port ? { port } : {}),
      });
    bouncer = await startBouncer();
    const viaListen = new URL(url);
    viaListen.hostname = net.postgresAddress;
    viaListen.port = String(listenPort);
    const env = (address: string): NodeJS.ProcessEnv => ({
      ...process.env,
      DATABASE_URL: (bouncer as PgBouncer).through(url),
      LISTEN_DATABASE_URL: viaListen.toString(),
      OPENFGA_API_URL: openfgaUrl,
      OPENFGA_STORE_ID: storeId,
      OPENFGA_MODEL_ID: authorizationModelId,
      HOST: address,
      DRAIN_INTERVAL_MS: '500',
      REDRIVE_INTERVAL_MS: '5000',
      AUDIT_INTERVAL_MS: '0',
      LOG_LEVEL: 'warn',
    });
    for (const [i, host] of net.hosts.entries()) {
      const process_ = new HostProcess(
        i,
        net.inHost(i, [process.execPath, '--import', 'tsx', 'services/platform/src/main.ts']),
        env(host.address),
      );
      process_.start();
      hosts.push(process_);
    }
    await Promise.all(net.hosts.map((h) => ready(h.address, 120_000)));
    say(
      `${HOSTS} hosts ready (${net.hosts.map((h) => h.address).join(', ')}), PgBouncer ${(bouncer as PgBouncer).through(url)}, OpenFGA ${openfgaUrl}`,
    );

    const home = net.hosts[0]?.address as string;
    const org = await call(home, SERVICE_PORTS.iam, 'POST', '/organizations', { name: 'acme' });
    const project = await call(home, SERVICE_PORTS.iam, 'POST', '/projects', {
      organization_id: org.body.id,
      name: 'web',
    });
    if (!project.body.id) throw new Error(`the setup failed: organization ${org.status}, project ${project.status}`);

    // The load: vpcs created on a random host, half deleted again on another, until the end.
    const answers = new Map<number, number>();
    const down = new Set<number>();
    const end = Date.now() + opts.durationS * 1_000;
    let n = 0;
    const episode = async () => {
      while (Date.now() < end) {
        const pick = () => random.pick(net.hosts.filter((_, i) => !down.has(i))).address;
        const created = await call(pick(), SERVICE_PORTS.vpc, 'POST', '/vpcs', {
          project_id: project.body.id,
          name: `v${(n += 1)}`,
          cidr_block: '10.0.0.0/16',
        });
        answers.set(created.status, (answers.get(created.status) ?? 0) + 1);
        if (created.body.id && random.chance(0.5)) {
          const deleted = await call(pick(), SERVICE_PORTS.vpc, 'DELETE', `/vpcs/${created.body.id}`);
          answers.set(deleted.status, (answers.get(deleted.status) ?? 0) + 1);
        }
      }
    };
    const faults: string[] = [];
    const schedule = async () => {
      const kinds = network
        ? ['kill-host', 'cut-postgres', 'kill-openfga', 'restart-pgbouncer']
        : ['kill-openfga', 'restart-pgbouncer'];
      while (Date.now() < end - 10_000) {
        await sleep(random.int(2_000, 6_000));
        const kind = random.pick(kinds);
        const i = random.int(0, HOSTS - 1);
        faults.push(`${kind}${kind.endsWith('host') || kind === 'cut-postgres' ? ` h${i + 1}` : ''}`);
        say(`fault: ${faults.at(-1)}`);
        if (kind === 'kill-host') {
          down.add(i);
          await hosts[i]?.kill();
          net.link(i, false);
          await sleep(3_000);
          net.link(i, true);
          hosts[i]?.start();
          await ready(net.hosts[i]?.address as string, 120_000);
          down.delete(i);
        } else if (kind === 'cut-postgres') {
          net.cutFromPostgres(i, true);
          await sleep(opts.cutS * 1_000);
          net.cutFromPostgres(i, false);
        } else if (kind === 'kill-openfga') {
          const r = random.int(0, replicas.length - 1);
          const port = replicas[r]?.httpPort as number;
          await replicas[r]?.stop();
          await sleep(2_000);
          replicas[r] = await startNativeOpenFga({
            datastore: 'postgres',
            datastoreUri,
            checkCacheTtlMs: 10_000,
            httpPort: port,
          });
        } else {
          const port = (bouncer as PgBouncer).port;
          await (bouncer as PgBouncer).stop();
          bouncer = await startBouncer(port);
        }
      }
    };
    await Promise.all([schedule(), ...Array.from({ length: opts.concurrency }, episode)]);
    say(`load over: ${[...answers].map(([s, c]) => `${c} × ${s}`).join(', ')}; faults: ${faults.join(', ') || 'none'}`);

    // Everything committed is delivered by the drainers on their own; then the checks.
    const settledBy = Date.now() + 180_000;
    for (;;) {
      const [vpc, iam] = [await outboxStats(direct, vpcOutbox), await outboxStats(direct, iamOutbox)];
      if (vpc.pending + iam.pending === 0) break;
      if (Date.now() > settledBy) break;
      await sleep(500);
    }
    const lost = (await outboxStats(direct, vpcOutbox)).pending + (await outboxStats(direct, iamOutbox)).pending;
    const order = await findOrderViolations(direct);
    const client = new OpenFgaClient({ apiUrl: balancerUrl, storeId });
    const writes = recorder.writes();
    const overlapping = overlappingWrites(writes);
    const drift = (await checkDrift(direct, client)).drifted.filter((d) => d.object.startsWith('vpc:'));
    const corrections = hosts.reduce(
      (sum, h) => sum + (h.output.match(/late write: OpenFGA differed/g)?.length ?? 0),
      0,
    );
    const violations = order.sentAtBackwards.length + order.deliveredPastDeliverable.length;
    console.log(
      [
        `seed ${opts.seed}: ${HOSTS} hosts${network ? ' (network namespaces)' : ' (loopback addresses)'}, ${opts.durationS} s, faults ${faults.length}`,
        `lost ${lost}`,
        `order violations ${violations}`,
        `drift ${drift.length}`,
        `overlapping requests ${overlapping} (of ${writes.length} Writes)`,
        `late-write corrections ${corrections}`,
      ].join('\n'),
    );
    await direct.destroy();
    return lost + violations + drift.length + overlapping === 0 ? 0 : 1;
  } finally {
    await Promise.all(hosts.map((h) => h.stop()));
    await recorder?.close();
    await balancer?.stop();
    await bouncer?.stop();
    for (const replica of replicas) await replica.stop();
    await stack.stop();
    net.remove();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(2);
  },
);
