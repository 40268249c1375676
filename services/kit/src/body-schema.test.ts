import { describe, expect, test } from 'vitest';
import { ID_FIELD, NAME_FIELD, validateBody, type FieldRule } from './body-schema.js';
import { HttpError } from './errors.js';

const rules: Record<string, FieldRule> = {
  project_id: ID_FIELD,
  name: NAME_FIELD,
  port: { type: 'integer', description: 'a port', min: 1, max: 65_535 },
  scheme: { type: 'string', description: 'a scheme', oneOf: ['internal', 'internet-facing'], default: 'internal' },
  versioning: { type: 'boolean', description: 'versioning', default: false },
};

const problem = (body: unknown) => {
  try {
    validateBody(body, rules);
  } catch (error) {
    expect(error).toBeInstanceOf(HttpError);
    expect((error as HttpError).status).toBe(400);
    return (error as HttpError).message;
  }
  throw new Error('expected a 400');
};

describe('validateBody', () => {
  test('fills defaults and returns exactly the known fields', () => {
    expect(validateBody({ project_id: 'p1', name: 'web-1', port: 80 }, rules)).toEqual({ project_id: 'p1', name: 'web-1', port: 80, scheme: 'internal', versioning: false });
  });

  test('lists every problem in one message', () => {
    const message = problem({ name: 'Web 1', port: 0, scheme: 'public', versioning: 'yes', extra: 1 });
    for (const part of ['project_id: required', 'name: expected a name', 'port: expected a port (1 to 65535), got 0', 'scheme: expected one of "internal", "internet-facing"', 'versioning: expected true or false', 'extra: unknown field']) {
      expect(message).toContain(part);
    }
  });

  test('names of Object.prototype are unknown fields too (constructor, toString, __proto__, hasOwnProperty)', () => {
    // As the server parses it: JSON.parse makes "__proto__" an own key, like any other.
    const body = JSON.parse('{"project_id":"p1","name":"a","port":1,"constructor":1,"toString":"x","__proto__":{"admin":true},"hasOwnProperty":false}');
    const message = problem(body);
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) expect(message).toContain(`${name}: unknown field`);
    expect(message).not.toContain('project_id:');
  });

  test('refuses what is not an object, wrong types and ids OpenFGA would not take', () => {
    expect(problem([])).toMatch(/expected a JSON object/);
    expect(problem(undefined)).toMatch(/expected a JSON object/);
    expect(problem({ project_id: 'p:1', name: 'a', port: 1 })).toContain('project_id: expected an id');
    expect(problem({ project_id: 'p1', name: 'a', port: 1.5 })).toContain('port: expected an integer');
    expect(problem({ project_id: 'x'.repeat(300), name: 'a', port: 1 })).toContain('project_id: longer than 256');
  });
});
