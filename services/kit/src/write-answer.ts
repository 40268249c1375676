import type { ServiceResponse } from './http-server.js';
import type { Delivery } from './service-outbox.js';

/**
 * The answer to a committed write: `status` (201, 200…) with `body` once its intent reached
 * OpenFGA; otherwise 202 with a `note` saying why delivery is pending: the row is committed and
 * the drainer delivers the intent, so the caller must not retry the write.
 */
export function writeAnswer(body: object, delivery: Delivery, status: number): ServiceResponse {
  return delivery.status === 'delivered' ? { status, body } : { status: 202, body: { ...body, note: delivery.note } };
}
