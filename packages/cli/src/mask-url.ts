/**
 * A connection URL fit to print: the password replaced by `***`, e.g.
 * `postgres://outbox:***@db:5432/platform`. A value that is not a URL is shown as `(not a URL)`, in
 * case it is a secret pasted in the wrong field.
 *
 * @example
 * maskUrl('postgres://u:hunter2@h/db'); // 'postgres://u:***@h/db'
 */
export function maskUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return '(not a URL)';
  }
  if (url.password !== '') url.password = '***';
  // Some drivers take the password as a query parameter too.
  for (const key of [...url.searchParams.keys()]) {
    if (/pass|secret|token/i.test(key)) url.searchParams.set(key, '***');
  }
  return url.toString();
}
