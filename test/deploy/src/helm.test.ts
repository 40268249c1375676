import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { platformServices } from '@outbox/platform';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { CHART, findHelm, HELM_INSTALL, renderChart, runHelm, type K8sObject } from './helm.js';
import { REPO } from './image-bundle.js';

// The chart (deploy/helm/outbox) linted and rendered by the pinned helm, its objects read back:
// the default values (every service with its drainer and reconciler in process) and the timer
// variant (values-timers.yaml: vpc and registry on CronJobs). helm needs no cluster for either.
const helm = findHelm();
const TIMERS = join(CHART, 'values-timers.yaml');
const TIMED = ['vpc', 'registry'];
const NAMES = platformServices.map((s) => s.name);
const DIRECT_ENV = ['DATABASE_URL', 'LISTEN_DATABASE_URL', 'OPENFGA_API_TOKEN'];

function need(): string {
  if (!helm)
    throw new Error(
      `helm is not installed (neither $(go env GOPATH)/bin/helm nor on PATH): run \`${HELM_INSTALL}\` (scripts/bootstrap.sh does)`,
    );
  return helm;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Container = any;
const ofKind = (objects: readonly K8sObject[], kind: string) => objects.filter((o) => o.kind === kind);
const named = (objects: readonly K8sObject[], kind: string, name: string) => {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found)
    throw new Error(`no ${kind} ${name} among ${objects.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')}`);
  return found;
};
/** A container's plain variables by name (those from a Secret are left out). */
const plainEnv = (container: Container): Record<string, string> =>
  Object.fromEntries(
    (container.env as Array<{ name: string; value?: string }>).flatMap((e) =>
      e.value === undefined ? [] : [[e.name, e.value]],
    ),
  );
/** Every variable taken from a Secret: name → `secret/key`. */
const secretEnv = (container: Container): Record<string, string> =>
  Object.fromEntries(
    (container.env as Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>)
      .filter((e) => e.valueFrom?.secretKeyRef)
      .map((e) => [e.name, `${e.valueFrom?.secretKeyRef?.name}/${e.valueFrom?.secretKeyRef?.key}`]),
  );
const podOf = (object: K8sObject) =>
  object.kind === 'CronJob' ? object.spec.jobTemplate.spec.template.spec : object.spec.template.spec;

/** What every container of the chart shares: the image as values give it, credentials from the Secret only. */
function expectCommon(container: Container, pullPolicy = 'IfNotPresent'): void {
  expect(container.image).toBe('outbox/services:local');
  expect(container.imagePullPolicy).toBe(pullPolicy);
  expect(secretEnv(container).DATABASE_URL).toBe('outbox/DATABASE_URL');
  for (const name of DIRECT_ENV) expect(plainEnv(container)).not.toHaveProperty(name);
  expect(plainEnv(container).NODE_OPTIONS).toBe('--max-semi-space-size=4 --max-old-space-size=64');
  expect(container.resources.requests).toMatchObject({ cpu: expect.any(String), memory: '144Mi' });
  expect(container.resources.limits).toMatchObject({ memory: '192Mi' });
  expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
}

describe('the Helm chart (deploy/helm/outbox)', () => {
  let work: string;
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'outbox-chart-'));
  });
  afterAll(() => {
    rmSync(work, { recursive: true, force: true });
  });

  test('helm lint --strict passes for the default values and for the timer variant', () => {
    const h = need();
    for (const args of [[], ['-f', TIMERS]]) {
      const run = runHelm(h, ['lint', '--strict', CHART, ...args]);
      expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
      expect(run.stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
    }
  });

  test('the chart knows each service by its name and own port', () => {
    const values = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as {
      services: Record<string, { port: number }>;
    };
    expect(Object.keys(values.services).sort()).toEqual([...NAMES].sort());
    for (const definition of platformServices)
      expect(values.services[definition.name]?.port).toBe(definition.defaultPort);
  });

  test('default values: six Deployments with their drainer and reconciler, probes, resources, a Service and a PDB each', () => {
    const { objects, text } = renderChart(need());
    expect(ofKind(objects, 'Deployment').map((o) => o.metadata.name)).toHaveLength(6);
    expect(ofKind(objects, 'CronJob')).toEqual([]);
    expect(ofKind(objects, 'PrometheusRule')).toEqual([]);
    // Secrets are referenced, never rendered.
    expect(ofKind(objects, 'Secret')).toEqual([]);
    expect(text).not.toMatch(/postgres(ql)?:\/\//);
    for (const { name, defaultPort } of platformServices) {
      const deployment = named(objects, 'Deployment', `outbox-${name}`);
      const pod = podOf(deployment);
      const [container] = pod.containers as Container[];
      expect(pod.containers).toHaveLength(1);
      expectCommon(container);
      expect(container.args).toEqual([name]);
      expect(container.ports).toEqual([{ name: 'http', containerPort: defaultPort, protocol: 'TCP' }]);
      expect(plainEnv(container)).toMatchObject({
        HOST: '0.0.0.0',
        PORT: String(defaultPort),
        RUN_DRAINER: 'true',
        RUN_RECONCILER: 'true',
        OPENFGA_API_URL: 'http://openfga:8080',
        LOG_LEVEL: 'info',
      });
      expect(plainEnv(container)).not.toHaveProperty('READY_MAX_DELIVERABLE_AGE_MS');
      // The probes name the port `http`, which is the service's own.
      expect(container.startupProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
      expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
      expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
      expect(container.readinessProbe.timeoutSeconds).toBeGreaterThan(2); // /readyz bounds each check at 2 s
      expect(container.volumeMounts).toEqual([{ name: 'outbox-config', mountPath: '/etc/outbox', readOnly: true }]);
      expect(pod.volumes).toEqual([{ name: 'outbox-config', configMap: { name: 'outbox-outbox-config' } }]);
      expect(pod.automountServiceAccountToken).toBe(false);
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true });
      expect(deployment.spec.replicas).toBe(2);
      expect(deployment.spec.template.metadata.annotations).toMatchObject({
        'prometheus.io/scrape': 'true',
        'prometheus.io/port': String(defaultPort),
        'prometheus.io/path': '/metrics',
      });

      const labels = deployment.spec.template.metadata.labels as Record<string, string>;
      expect(deployment.spec.selector.matchLabels).toEqual({
        'app.kubernetes.io/name': 'outbox',
        'app.kubernetes.io/instance': 'outbox',
        'app.kubernetes.io/component': name,
      });
      const service = named(objects, 'Service', `outbox-${name}`);
      expect(service.spec.ports).toEqual([{ name: 'http', port: defaultPort, targetPort: 'http', protocol: 'TCP' }]);
      expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
      const pdb = named(objects, 'PodDisruptionBudget', `outbox-${name}`);
      expect(pdb.apiVersion).toBe('policy/v1');
      expect(pdb.spec.maxUnavailable).toBe(1);
      expect(labels).toMatchObject(pdb.spec.selector.matchLabels);
    }
  });

  test('default values: the migrations run as a pre-install and pre-upgrade hook Job', () => {
    const { objects } = renderChart(need());
    const job = named(objects, 'Job', 'outbox-migrate');
    expect(job.metadata.annotations).toMatchObject({
      'helm.sh/hook': 'pre-install,pre-upgrade',
      'helm.sh/hook-delete-policy': 'before-hook-creation,hook-succeeded',
    });
    const pod = podOf(job);
    expect(pod.restartPolicy).toBe('Never');
    const [container] = pod.containers as Container[];
    expectCommon(container);
    expect(container.args).toEqual(['migrate']);
    // A hook runs before the release's own objects exist: it must not need one.
    expect(pod.volumes).toBeUndefined();
    expect(container.envFrom).toBeUndefined();
  });

  test('the outbox ConfigMap holds the outbox config, whose outboxes are the services’ specs', () => {
    const { objects } = renderChart(need());
    const config = named(objects, 'ConfigMap', 'outbox-outbox-config');
    const file = readFileSync(join(CHART, 'files/outbox.config.json'), 'utf8');
    expect(config.data?.['outbox.config.json']).toBe(file.trim());
    const parsed = JSON.parse(file) as { outboxes: Record<string, Record<string, unknown>> };
    expect(parsed).toMatchObject({ databaseUrl: '$DATABASE_URL', openfga: { apiUrl: '$OPENFGA_API_URL' } });
    // The config is JSON (no code in a ConfigMap), so the specs are written out: they must be the services' own.
    expect(parsed.outboxes).toEqual(
      Object.fromEntries(
        platformServices.map(({ name, outbox }) => [
          name,
          {
            table: outbox.table,
            partitionColumn: outbox.partitionColumn,
            channel: outbox.channel,
            maxAttempts: outbox.maxAttempts,
            ...(outbox.supersededCoverageSql ? { supersededCoverageSql: outbox.supersededCoverageSql } : {}),
          },
        ]),
      ),
    );
  });

  test('default values: the dashboard ConfigMap for the Grafana sidecar is docs/grafana/outbox-dashboard.json', () => {
    const { objects } = renderChart(need());
    const dashboard = named(objects, 'ConfigMap', 'outbox-dashboard');
    expect(dashboard.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(JSON.parse(dashboard.data?.['outbox-dashboard.json'] ?? '')).toEqual(
      JSON.parse(readFileSync(join(REPO, 'docs/grafana/outbox-dashboard.json'), 'utf8')),
    );
  });

  test('the timer variant: vpc and registry without drainer and reconciler, each with a drain and a redrive CronJob', () => {
    const { objects, text } = renderChart(need(), ['-f', TIMERS]);
    expect(text).not.toMatch(/postgres(ql)?:\/\//);
    expect(ofKind(objects, 'Deployment')).toHaveLength(6);
    expect(
      ofKind(objects, 'CronJob')
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual(TIMED.flatMap((name) => [`outbox-${name}-drain`, `outbox-${name}-redrive`]).sort());
    for (const name of NAMES) {
      const [container] = podOf(named(objects, 'Deployment', `outbox-${name}`)).containers as Container[];
      const timed = TIMED.includes(name);
      expect(plainEnv(container)).toMatchObject({
        RUN_DRAINER: String(!timed),
        RUN_RECONCILER: String(!timed),
        HOST: '0.0.0.0',
      });
      // A pass a minute: /readyz must not call an intent waiting for the next tick stalled.
      if (timed) expect(Number(plainEnv(container).READY_MAX_DELIVERABLE_AGE_MS)).toBeGreaterThan(120_000);
    }
    expect(named(objects, 'Deployment', 'outbox-registry').spec.replicas).toBe(1);

    for (const name of TIMED) {
      const drain = named(objects, 'CronJob', `outbox-${name}-drain`);
      const redrive = named(objects, 'CronJob', `outbox-${name}-redrive`);
      for (const cron of [drain, redrive]) {
        expect(cron.apiVersion).toBe('batch/v1');
        expect(cron.spec.concurrencyPolicy).toBe('Forbid');
        expect(cron.spec.jobTemplate.spec.backoffLimit).toBe(0);
        expect(cron.spec.jobTemplate.spec.activeDeadlineSeconds).toBeGreaterThan(0);
        expect(podOf(cron).restartPolicy).toBe('Never');
        expectCommon(podOf(cron).containers[0]);
      }
      expect(drain.spec.schedule).toBe('* * * * *');
      expect(redrive.spec.schedule).toBe('*/5 * * * *');
      // One drain pass of the service's outbox (`outbox drain` on it, without --until-empty).
      expect(podOf(drain).containers[0].args).toEqual([`${name}-drain`]);
      // The reconciler's pass through the command line, reading the outbox ConfigMap.
      expect(podOf(redrive).containers[0].args).toEqual([
        'outbox',
        'redrive',
        '--config',
        '/etc/outbox/outbox.config.json',
        '--outbox',
        name,
        '--actor',
        `outbox-${name}-redrive`,
      ]);
      expect(podOf(redrive).volumes).toEqual([{ name: 'outbox-config', configMap: { name: 'outbox-outbox-config' } }]);
    }
  });

  test('with a direct URL for LISTEN: the services and the migrations use it, the Secret stays the only source', () => {
    const { objects } = renderChart(need(), [
      '--set',
      'secret.listenDatabaseUrlKey=DIRECT_URL',
      '--set',
      'secret.openfgaApiTokenKey=FGA_KEY',
      '--set',
      'image.pullPolicy=Never',
    ]);
    for (const name of NAMES) {
      const [container] = podOf(named(objects, 'Deployment', `outbox-${name}`)).containers as Container[];
      expectCommon(container, 'Never');
      expect(secretEnv(container)).toEqual({
        DATABASE_URL: 'outbox/DATABASE_URL',
        LISTEN_DATABASE_URL: 'outbox/DIRECT_URL',
        OPENFGA_API_TOKEN: 'outbox/FGA_KEY',
      });
    }
    // pnpm migrate holds a session advisory lock, which a transaction pooler would not keep.
    const [migrate] = podOf(named(objects, 'Job', 'outbox-migrate')).containers as Container[];
    expect(secretEnv(migrate)).toEqual({ DATABASE_URL: 'outbox/DIRECT_URL', OPENFGA_API_TOKEN: 'outbox/FGA_KEY' });
  });

  test('refused: a credential in values, an unknown mode; a number from a values file is printed as digits', () => {
    const h = need();
    const refused = runHelm(h, ['template', 'outbox', CHART, '--set', 'env.DATABASE_URL=postgres://u:p@db/x']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('env.DATABASE_URL: credentials come from the Secret');
    const mode = runHelm(h, ['template', 'outbox', CHART, '--set', 'services.vpc.mode=cron']);
    expect(mode.code).not.toBe(0);
    expect(mode.stderr).toContain('services.vpc.mode: "cron" is neither inProcess nor timers');

    // Helm reads numbers in values files as floats; the services refuse `1e+06`.
    const file = join(work, 'numbers.yaml');
    writeFileSync(file, 'env:\n  DRAIN_INTERVAL_MS: 1000000\nservices:\n  vpc:\n    env:\n      DB_POOL_SIZE: 12\n');
    const { objects } = renderChart(h, ['-f', file]);
    const [vpc] = podOf(named(objects, 'Deployment', 'outbox-vpc')).containers as Container[];
    expect(plainEnv(vpc)).toMatchObject({ DRAIN_INTERVAL_MS: '1000000', DB_POOL_SIZE: '12' });
  });

  test('helm package carries the rules and the dashboard of docs/ (symlinked into the chart, not copied)', () => {
    const h = need();
    const run = runHelm(h, ['package', CHART, '--destination', work]);
    expect(run.code, run.stderr).toBe(0);
    const packaged = join(work, 'outbox-0.1.0.tgz');
    const { objects } = renderChart(
      h,
      ['--set', 'monitoring.prometheusRule.enabled=true', '--set', 'monitoring.prometheusRule.labels.release=kps'],
      {
        chart: packaged,
      },
    );
    const rule = named(objects, 'PrometheusRule', 'outbox-alerts');
    expect(rule.apiVersion).toBe('monitoring.coreos.com/v1');
    expect(rule.metadata.labels).toMatchObject({ release: 'kps' });
    expect(rule.spec).toEqual(parse(readFileSync(join(REPO, 'docs/prometheus/outbox-alerts.yml'), 'utf8')));
    const dashboard = named(objects, 'ConfigMap', 'outbox-dashboard');
    expect(JSON.parse(dashboard.data?.['outbox-dashboard.json'] ?? '')).toEqual(
      JSON.parse(readFileSync(join(REPO, 'docs/grafana/outbox-dashboard.json'), 'utf8')),
    );
  });
});
