import { describe, expect, test } from 'vitest';
import { expandEnv } from './env-refs.js';
import { maskUrl } from './mask-url.js';

describe('environment references in a config value', () => {
  const env = { DB_HOST: 'db', DB_PASSWORD: 'p$w', EMPTY: '' };
  test('$NAME and ${NAME} are replaced, inside a value too; $$ is a dollar', () => {
    expect(expandEnv('databaseUrl', 'postgres://app:${DB_PASSWORD}@$DB_HOST/platform', env, 'c.json')).toBe(
      'postgres://app:p$w@db/platform',
    );
    expect(expandEnv('f', 'cost: $$5', env, 'c.json')).toBe('cost: $5');
  });

  test('${NAME:-text} falls back on unset and empty; a value that comes out empty is unset', () => {
    expect(expandEnv('f', '${NOPE:-http://127.0.0.1:8080}', env, 'c.json')).toBe('http://127.0.0.1:8080');
    expect(expandEnv('f', '${EMPTY:-x}', env, 'c.json')).toBe('x');
    expect(expandEnv('openfga.authorizationModelId', '${NOPE:-}', env, 'c.json')).toBeUndefined();
  });

  test('an unset or empty required variable is a usage error naming it and the field', () => {
    expect(() => expandEnv('openfga.storeId', '$EMPTY', env, 'c.json')).toThrow(
      'c.json: openfga.storeId: environment variable EMPTY is not set',
    );
  });
});

describe('maskUrl', () => {
  test('hides the password of a URL and of a password-like query parameter, never the rest', () => {
    expect(maskUrl('postgres://app:s3cr%40t@db:5432/platform?sslmode=require')).toBe(
      'postgres://app:***@db:5432/platform?sslmode=require',
    );
    expect(maskUrl('postgres://db/platform?user=app&password=s3cret')).toBe(
      'postgres://db/platform?user=app&password=***',
    );
    expect(maskUrl('postgres://app@db/platform')).toBe('postgres://app@db/platform');
    expect(maskUrl('s3cret-pasted-in-the-wrong-field')).toBe('(not a URL)');
  });
});
