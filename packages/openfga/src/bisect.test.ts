import { useOpenFgaStore, useTestDatabase } from '@outbox/test-stack';
import { stored, tupleKey } from '@outbox/test-stack/openfga';
import { describe, expect, test } from 'vitest';
import { drainOnce, intent, noDeadline, outboxTables, sinkOn, writes } from './testing/fixtures.js';
import type { OpenFgaWriteEvent } from './write-request.js';

const t = useTestDatabase();
const fga = useOpenFgaStore();
const outbox = outboxTables(t);

describe('one bad intent fails alone', () => {
  test("one intent with an unknown type among 50: only it is permanent, with OpenFGA's message; the 49 land in the same call", async () => {
    const events: OpenFgaWriteEvent[] = [];
    const sink = sinkOn(fga, { onRequest: (event) => events.push(event) });
    const batch = Array.from({ length: 50 }, (_, i) =>
      i === 31
        ? intent(`vpc:bad${i}`, writes(`user:gil owner nosuchtype:bad${i}`))
        : intent(`vpc:bad${i}`, writes(`user:gil owner vpc:bad${i}`, `project:bad project vpc:bad${i}`)),
    );
    const outcomes = await sink.deliver(batch, noDeadline());
    expect(outcomes[31]).toEqual({
      kind: 'permanent',
      error:
        "OpenFGA 400 validation_error: Invalid tuple 'nosuchtype:bad31#owner@user:gil'. Reason: type 'nosuchtype' not found",
      code: 'validation_error',
    });
    expect(outcomes.filter((o, i) => i !== 31 && o.kind === 'delivered')).toHaveLength(49);
    for (let i = 0; i < 50; i += 1) {
      if (i !== 31) expect(await stored(fga.client, tupleKey(`user:gil owner vpc:bad${i}`))).toBe(true);
    }
    // Bisection: one refused request of 50, then halves down to the bad one (about 2·log2(50) more).
    expect(events[0]).toMatchObject({ intents: 50, result: 'permanent', rule: 'invalid-input' });
    expect(events.length).toBeGreaterThan(2);
    expect(events.length).toBeLessThanOrEqual(13);
  });

  test("a tuple that exists with a different condition: 409, permanent, with OpenFGA's message", async () => {
    const condition = { name: 'non_expired_grant', context: { grant_expires_at: '2030-01-01T00:00:00Z' } };
    await fga.client.write({ writes: [{ ...tupleKey('user:hal viewer project:cond'), condition }] });
    const sink = sinkOn(fga);
    const outcomes = await sink.deliver(
      [
        intent('project:cond', writes('user:hal viewer project:cond')),
        intent('project:other', writes('user:hal viewer project:other')),
      ],
      noDeadline(),
    );
    expect(outcomes[0]).toEqual({
      kind: 'permanent',
      error:
        "OpenFGA 409 Aborted: transactional write failed due to conflict: attempted to write a tuple which already exists with a different condition: user: 'user:hal', relation: 'viewer', object: 'project:cond'",
      code: 'Aborted',
    });
    expect(outcomes[1]).toEqual({ kind: 'delivered' });
  });

  test('a payload edited into an invalid shape fails permanently without a request; its successors are skipped', async () => {
    const events: OpenFgaWriteEvent[] = [];
    const sink = sinkOn(fga, { onRequest: (event) => events.push(event) });
    const outcomes = await sink.deliver(
      [
        intent('vpc:edit', { writes: [{ user: 'user:ida', relation: 'owner' }] } as never),
        intent('vpc:edit', writes('user:ida owner vpc:edit')),
      ],
      noDeadline(),
    );
    expect(outcomes[0]).toMatchObject({
      kind: 'permanent',
      error: expect.stringMatching(/^invalid intent payload, not sent: payload\.writes\[0\]\.object/),
      code: 'invalid_intent',
    });
    expect(outcomes[1]).toEqual({ kind: 'skipped' });
    expect(events).toEqual([]);
  });
});

describe('through the real drainer', () => {
  test("one bad intent among 50 poisons only its row, refused with OpenFGA's code and its message in last_error; the others are sent", async () => {
    const spec = await outbox.fresh();
    await outbox.enqueue(
      spec,
      Array.from({ length: 50 }, (_, i) => ({
        partitionKey: `vpc:e2ebad${i}`,
        payload: writes(i === 17 ? `user:cy owner nosuchtype:e2ebad${i}` : `user:cy owner vpc:e2ebad${i}`),
      })),
    );
    expect(await drainOnce(t, spec, sinkOn(fga))).toMatchObject({
      claimed: 50,
      delivered: 49,
      poisoned: 1,
      retried: 0,
      halted: false,
    });
    const all = await outbox.rows(spec);
    const bad = all.find((row) => row.resource_id === 'vpc:e2ebad17');
    expect(bad).toMatchObject({
      sent: false,
      attempt_count: 10,
      last_error:
        "OpenFGA 400 validation_error: Invalid tuple 'nosuchtype:e2ebad17#owner@user:cy'. Reason: type 'nosuchtype' not found",
      poison_cause: 'refused',
      poison_code: 'validation_error',
    });
    expect(all.filter((row) => row.sent)).toHaveLength(49);
    expect(await stored(fga.client, tupleKey('user:cy owner vpc:e2ebad16'))).toBe(true);
  });
});
