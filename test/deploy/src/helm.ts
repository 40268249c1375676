import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO } from './image-bundle.js';

/** The chart's directory. */
export const CHART = join(REPO, 'deploy/helm/outbox');

/** How helm gets here: the pinned version, built with go and cached beside OpenFGA. */
export const HELM_INSTALL = 'go install helm.sh/helm/v3/cmd/helm@v3.22.0';

/** `$(go env GOPATH)`, with go on PATH or where the Go tarball puts it (as scripts/bootstrap.sh looks). */
function goPath(): string | undefined {
  for (const go of ['go', '/usr/local/go/bin/go']) {
    const result = spawnSync(go, ['env', 'GOPATH'], { encoding: 'utf8', timeout: 10_000 });
    if (result.status === 0 && result.stdout.trim()) return result.stdout.trim();
  }
  return undefined;
}

/** helm: `$(go env GOPATH)/bin/helm`, else the one on PATH; undefined when neither is there. */
export function findHelm(): string | undefined {
  const gopath = goPath();
  const cached = gopath ? join(gopath, 'bin', 'helm') : undefined;
  if (cached && existsSync(cached)) return cached;
  const onPath = spawnSync('helm', ['version', '--short'], { encoding: 'utf8', timeout: 10_000 });
  return onPath.status === 0 ? 'helm' : undefined;
}

/** What a helm command printed, and how it ended. */
export interface HelmRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs helm with `args`, bounded: no helm command here touches the network or a cluster. */
export function runHelm(helm: string, args: readonly string[]): HelmRun {
  const result = spawnSync(helm, args, {
    encoding: 'utf8',
    timeout: 30_000,
    // No repositories, plugins or kubeconfig of the machine's: only the chart in the checkout.
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      HELM_CACHE_HOME: join(tmpdir(), 'outbox-helm', 'cache'),
      HELM_CONFIG_HOME: join(tmpdir(), 'outbox-helm', 'config'),
      HELM_DATA_HOME: join(tmpdir(), 'outbox-helm', 'data'),
      KUBECONFIG: '/dev/null',
    },
  });
  if (result.error) throw result.error;
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** A rendered Kubernetes object, as far as the tests read it. */
export interface K8sObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: {
    readonly name: string;
    readonly labels?: Record<string, string>;
    readonly annotations?: Record<string, string>;
  };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly spec?: any;
  readonly data?: Record<string, string>;
}

/** `helm template <release> <chart> [args]`: the objects, parsed; throws with helm's words when it fails. */
export function renderChart(
  helm: string,
  args: readonly string[] = [],
  options: { release?: string; chart?: string } = {},
): { objects: K8sObject[]; text: string } {
  const run = runHelm(helm, ['template', options.release ?? 'outbox', options.chart ?? CHART, ...args]);
  if (run.code !== 0) throw new Error(`helm template ${args.join(' ')} failed (${run.code}):\n${run.stderr}`);
  const objects: K8sObject[] = [];
  for (const document of parseAllDocuments(run.stdout)) {
    if (document.errors.length > 0) throw new Error(`helm template printed invalid YAML: ${document.errors[0]}`);
    const object = document.toJS() as K8sObject | null;
    if (object) objects.push(object);
  }
  return { objects, text: run.stdout };
}
