import { describe, expect, test } from 'vitest';
import { ServiceConfigError } from './errors.js';
import { serviceOptionsFromEnv } from './service-options.js';

const env = { DATABASE_URL: 'postgres://db/x', OPENFGA_API_URL: 'http://fga:8080', OPENFGA_STORE_ID: 'store' };

/** The ServiceConfigError `fn` throws, as `field: message`, or 'accepted: <what it read>'. */
function refusal(fn: () => unknown): string {
  try {
    return `accepted: ${JSON.stringify(fn())}`;
  } catch (error) {
    expect(error).toBeInstanceOf(ServiceConfigError);
    return `${(error as ServiceConfigError).field}: ${(error as Error).message}`;
  }
}

describe('environment variables an operator gets wrong', () => {
  test('an out-of-range number is refused naming the variable set (DB_POOL_SIZE), not the option it feeds (poolSize)', () => {
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, DB_POOL_SIZE: '0' }))).toMatch(/^DB_POOL_SIZE: /);
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, PORT: '70000' }))).toMatch(/^PORT: .*0 to 65535/);
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, DRAIN_INTERVAL_MS: '0' }))).toMatch(/^DRAIN_INTERVAL_MS: /);
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, FLUSH_TIMEOUT_MS: '6000000' }))).toMatch(
      /^FLUSH_TIMEOUT_MS: /,
    );
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, REDRIVE_INTERVAL_MS: '0' }))).toMatch(
      /^REDRIVE_INTERVAL_MS: /,
    );
  });

  test('hex, exponent and padded numbers are refused, not read as something else (PORT=0x1F90 listened on 8080)', () => {
    for (const raw of ['0x1F90', '1e3', ' 80', '80 ', '8_0', '-1', '1.0']) {
      expect(
        refusal(() => serviceOptionsFromEnv(1, { ...env, PORT: raw })),
        raw,
      ).toMatch(/^PORT: /);
    }
    expect(serviceOptionsFromEnv(1, { ...env, PORT: '8080', DB_POOL_SIZE: '10' })).toMatchObject({
      port: 8080,
      poolSize: 10,
    });
  });

  test('LISTEN_DATABASE_URL, RUN_DRAINER and RUN_RECONCILER: read, checked, and defaulted', () => {
    expect(serviceOptionsFromEnv(1, env)).toMatchObject({ databaseUrl: 'postgres://db/x' });
    expect(serviceOptionsFromEnv(1, env).listenDatabaseUrl).toBeUndefined();
    const direct = { ...env, LISTEN_DATABASE_URL: 'postgres://db:5432/x', RUN_DRAINER: 'false', RUN_RECONCILER: '0' };
    expect(serviceOptionsFromEnv(1, direct)).toMatchObject({
      listenDatabaseUrl: 'postgres://db:5432/x',
      runDrainer: false,
      runReconciler: false,
    });
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, LISTEN_DATABASE_URL: 'db:5432' }))).toMatch(
      /^LISTEN_DATABASE_URL: /,
    );
    expect(refusal(() => serviceOptionsFromEnv(1, { ...env, RUN_DRAINER: 'no' }))).toMatch(/^RUN_DRAINER: /);
  });

  test('OPENFGA_API_URL with trailing slashes is the same server', () => {
    expect(serviceOptionsFromEnv(1, { ...env, OPENFGA_API_URL: 'http://fga:8080//' }).openfga.apiUrl).toBe(
      'http://fga:8080',
    );
  });
});
