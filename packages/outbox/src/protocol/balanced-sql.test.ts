import { describe, expect, it } from 'vitest';
import { balancedSql } from './balanced-sql.js';

describe('balancedSql', () => {
  it('accepts balanced parentheses and quotes, a parenthesis inside a literal included', () => {
    for (const fragment of ["s.a = x.a and (s.b = ')' or s.c)", `"q""uoted" = 'it''s'`, ''])
      expect(balancedSql(fragment), fragment).toBe(true);
  });
  it('refuses a fragment that closes the parentheses it is wrapped in, or leaves a quote open', () => {
    for (const fragment of ['true) or (true', 'a = (b', "a = 'b", 'a = "b'])
      expect(balancedSql(fragment), fragment).toBe(false);
  });
});
