import { describe, expect, test } from 'vitest';
import { ServiceConfigError } from './errors.js';
import { resolveServiceOptions, serviceOptionsFromEnv } from './service-options.js';

const env = { DATABASE_URL: 'postgres://db/x', OPENFGA_API_URL: 'http://fga:8080', OPENFGA_STORE_ID: 'store' };

describe('service options', () => {
  test('from the environment, with defaults', () => {
    const options = serviceOptionsFromEnv(3001, env);
    expect(options).toMatchObject({
      databaseUrl: 'postgres://db/x',
      port: 3001,
      openfga: { apiUrl: 'http://fga:8080', storeId: 'store' },
    });
    expect(options.openfga.credentials).toBeUndefined();
    const resolved = resolveServiceOptions('vpc', options);
    expect(resolved).toMatchObject({
      host: '127.0.0.1',
      drainIntervalMs: 1_000,
      redriveIntervalMs: 60_000,
      auditIntervalMs: 300_000,
      repairDrift: true,
      repairMaxDeletes: 100,
      flushOnWrite: true,
      flushTimeoutMs: 5_000,
    });
  });

  test('every knob can be set, and a token becomes the API-token credential', () => {
    const options = serviceOptionsFromEnv(3001, {
      ...env,
      PORT: '9000',
      HOST: '0.0.0.0',
      DRAIN_INTERVAL_MS: '250',
      REDRIVE_INTERVAL_MS: '5000',
      AUDIT_INTERVAL_MS: '0',
      REPAIR_DRIFT: 'false',
      REPAIR_MAX_DELETES: '5',
      FLUSH_ON_WRITE: 'false',
      FLUSH_TIMEOUT_MS: '100',
      OPENFGA_MODEL_ID: 'model',
      OPENFGA_API_TOKEN: 'key',
    });
    expect(options).toMatchObject({
      port: 9000,
      host: '0.0.0.0',
      drainIntervalMs: 250,
      redriveIntervalMs: 5_000,
      auditIntervalMs: 0,
      repairDrift: false,
      repairMaxDeletes: 5,
      flushOnWrite: false,
      flushTimeoutMs: 100,
    });
    expect(resolveServiceOptions('vpc', { ...options, auditIntervalMs: false }).auditIntervalMs).toBe(0);
    expect(options.openfga).toMatchObject({ authorizationModelId: 'model', credentials: { config: { token: 'key' } } });
  });

  test('a missing or malformed variable is a ServiceConfigError naming it', () => {
    const field = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        expect(error).toBeInstanceOf(ServiceConfigError);
        return (error as ServiceConfigError).field;
      }
      return undefined;
    };
    expect(field(() => serviceOptionsFromEnv(1, { ...env, DATABASE_URL: '' }))).toBe('DATABASE_URL');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, OPENFGA_STORE_ID: undefined }))).toBe('OPENFGA_STORE_ID');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, PORT: 'eighty' }))).toBe('PORT');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, FLUSH_ON_WRITE: 'maybe' }))).toBe('FLUSH_ON_WRITE');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, REPAIR_DRIFT: 'sometimes' }))).toBe('REPAIR_DRIFT');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, REPAIR_MAX_DELETES: '-1' }))).toBe('REPAIR_MAX_DELETES');
    expect(field(() => serviceOptionsFromEnv(1, { ...env, AUDIT_INTERVAL_MS: '99999999999' }))).toBe(
      'AUDIT_INTERVAL_MS',
    );
    expect(field(() => resolveServiceOptions('x', { ...serviceOptionsFromEnv(1, env), drainIntervalMs: 0 }))).toBe(
      'drainIntervalMs',
    );
  });
});
