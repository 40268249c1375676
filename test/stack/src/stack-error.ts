/**
 * A part of the test stack could not be started. The message says what is missing and how to
 * get it; `cause` keeps the underlying failure.
 */
export class StackError extends Error {
  override readonly name = 'StackError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
