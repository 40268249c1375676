/** Orders two row ids as pg returns them (positive bigints as decimal strings), as `BigInt(a) - BigInt(b)` would without building BigInts. */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
