/** SQLSTATE codes the outbox packages react to, by name. */
export const SQLSTATE = Object.freeze({
  UNDEFINED_TABLE: '42P01',
  UNDEFINED_COLUMN: '42703',
  UNDEFINED_FUNCTION: '42883',
  SYNTAX_ERROR: '42601',
  LOCK_NOT_AVAILABLE: '55P03',
  DEADLOCK_DETECTED: '40P01',
  SERIALIZATION_FAILURE: '40001',
  QUERY_CANCELED: '57014',
  ADMIN_SHUTDOWN: '57P01',
  INVALID_PASSWORD: '28P01',
  INVALID_AUTHORIZATION_SPECIFICATION: '28000',
  INVALID_CATALOG_NAME: '3D000',
});

/** The SQLSTATE of a pg error, if it is one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}
