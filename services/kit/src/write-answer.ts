import type { FastifyReply } from 'fastify';
import type { Delivery } from './service-outbox.js';

/**
 * The answer to a committed write: `status` (201, 200…) with `body` once its intent reached
 * OpenFGA; otherwise 202 with a `note` saying why delivery is pending: the row is committed and
 * the drainer delivers the intent, so the caller must not retry the write. Sets the status on
 * `reply` and returns the body to send.
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
  if (delivery.status === 'delivered') {
    void reply.code(status);
    return body;
  }
  void reply.code(202);
  return { ...body, note: delivery.note };
}
