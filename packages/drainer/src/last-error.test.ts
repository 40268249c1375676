import { describe, expect, test } from 'vitest';
import { MAX_LAST_ERROR_LENGTH, sanitizeLastError } from './last-error.js';

describe('last_error', () => {
  test('carries no credentials', () => {
    const raw =
      'POST failed: Authorization: Bearer abc.def.ghi token=xyz password: hunter2 at postgres://app:pw@db:5432/x';
    const clean = sanitizeLastError(new Error(raw));
    for (const secret of ['abc.def.ghi', 'xyz', 'hunter2', 'app:pw']) expect(clean).not.toContain(secret);
    expect(clean).toContain('POST failed');
  });
  test('is truncated', () => {
    expect(sanitizeLastError('x'.repeat(10_000))).toHaveLength(MAX_LAST_ERROR_LENGTH);
  });
});
