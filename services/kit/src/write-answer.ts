import type { FastifyReply } from 'fastify';
import { TOKEN_HEADER } from './read-consistency.js';
import type { Delivery } from './service-outbox.js';

/** Sets `Outbox-Token` on `reply` when the write has one: another service's request passes it on. */
export function tokenHeader(reply: FastifyReply, delivery: Delivery): void {
  if (delivery.token) void reply.header(TOKEN_HEADER, delivery.token);
}

/**
 * The answer to a committed write: `status` (201, 200…) with `body` once its intent reached
 * OpenFGA; otherwise 202 with a `note` saying why delivery is pending: the row is committed and
 * the drainer delivers the intent, so the caller must not retry the write. Sets the status and
 * the `Outbox-Token` header on `reply` and returns the body to send.
 *
 * @example
 * return writeAnswer(reply, row, await ctx.outbox.settle(partitionKey), 201);
 */
export function writeAnswer<T extends object>(
  reply: FastifyReply,
  body: T,
  delivery: Delivery,
  status: number,
): T | (T & { note: string }) {
  tokenHeader(reply, delivery);
  if (delivery.status === 'delivered') {
    void reply.code(status);
    return body;
  }
  void reply.code(202);
  return { ...body, note: delivery.note };
}
