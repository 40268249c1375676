import { once } from 'node:events';
import type { IncomingMessage } from 'node:http';
import { HttpError } from './errors.js';

/** Request bodies larger than this are refused (413): resources are small JSON objects. */
export const MAX_BODY_BYTES = 64 * 1024;

/**
 * How long a refused body is read (and dropped) before the 413 is sent. Closing a socket that still
 * has unread data makes the kernel answer with a reset, which reaches the client before (or instead
 * of) the 413 it was sent: reading the rest first lets the connection end with a clean FIN.
 */
const DISCARD_TIMEOUT_MS = 5_000;

/**
 * Reads a request body as JSON, whatever its content-type says: `curl -d` labels JSON as a form,
 * and refusing it would only teach people to add a header. A fastify content-type parser for `*`.
 * An empty body is `undefined` (the route's schema says whether that is allowed); what does not
 * parse is a 400 `invalid_json`, a body larger than {@link MAX_BODY_BYTES} a 413 `body_too_large`,
 * and a body the client stopped sending a 400 `body_incomplete`.
 *
 * @example
 * app.addContentTypeParser('*', (request, payload) => readJsonBody(payload));
 */
export async function readJsonBody(payload: IncomingMessage): Promise<unknown> {
  const tooLarge = () =>
    new HttpError(413, 'body_too_large', `the request body is larger than ${MAX_BODY_BYTES} bytes`);
  if (Number(payload.headers['content-length']) > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) {
        chunks.push(chunk);
        return;
      }
      // Stop keeping it, but let it flow: the 413 waits for the rest (see discardBody).
      payload.off('data', onData);
      reject(tooLarge());
    };
    payload.on('data', onData);
    payload.once('end', resolve);
    // The client went away mid-body (node: 'aborted', code ECONNRESET). Its fault, not ours, and not
    // the database's: that code was once read as "the database is unavailable" and logged so.
    payload.once('error', (error) =>
      reject(new HttpError(400, 'body_incomplete', `the request body ended before it was complete (${error.message})`)),
    );
  });
  if (size === 0) return undefined;
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (error) {
    throw new HttpError(400, 'invalid_json', `the request body is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * Reads and drops what is left of a refused request's body (at most {@link DISCARD_TIMEOUT_MS}),
 * so that the answer sent after it, with `connection: close`, ends the connection cleanly.
 */
export async function discardBody(request: IncomingMessage): Promise<void> {
  if (request.complete || request.destroyed) return;
  request.resume();
  const signal = AbortSignal.timeout(DISCARD_TIMEOUT_MS);
  await Promise.race([once(request, 'end', { signal }), once(request, 'close', { signal })]).catch(() => undefined);
}
