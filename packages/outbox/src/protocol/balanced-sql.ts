/**
 * True when parentheses balance outside quotes (a `'('` in a literal is text) and every quote closes,
 * so a caller's SQL fragment cannot close the `(…)` it is wrapped in.
 */
export function balancedSql(fragment: string): boolean {
  let depth = 0;
  let quote: string | undefined;
  for (const char of fragment) {
    if (quote) {
      if (char === quote) quote = undefined; // a doubled quote reopens on the next character: still balanced
    } else if (char === "'" || char === '"') quote = char;
    else if (char === '(') depth += 1;
    else if (char === ')' && --depth < 0) return false;
  }
  return depth === 0 && quote === undefined;
}
