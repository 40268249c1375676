/**
 * The Quint model of the protocol (docs/protocol-model.md): the protocol as built keeps its
 * invariants over the fixed exploration, the mutant without the redrive guard breaks delivery
 * order (so the simulation can fail), and the spec's replays pass. Three quint processes, started
 * together: each spends ~5 s parsing and type-checking the spec before it simulates.
 */
import { beforeAll, describe, expect, test } from 'vitest';
import {
  INVARIANTS,
  MUTANT_BREAKS,
  MUTANT_MODULE,
  PROTOCOL_MODULE,
  REPLAYS,
  TEST_EXPLORATION,
  passedReplays,
  replay,
  simulate,
  verdict,
  type QuintResult,
} from './quint.js';

/** A loaded 2-core machine runs these at a fifth of their speed: minutes, not seconds. */
const TIMEOUT_MS = 600_000;

let protocol: Promise<QuintResult>;
let mutant: Promise<QuintResult>;
let replays: Promise<QuintResult>;

beforeAll(() => {
  protocol = simulate(PROTOCOL_MODULE, INVARIANTS, TEST_EXPLORATION, TIMEOUT_MS);
  mutant = simulate(MUTANT_MODULE, [MUTANT_BREAKS], TEST_EXPLORATION, TIMEOUT_MS);
  replays = replay(TIMEOUT_MS);
});

describe('the protocol model', () => {
  test(
    `the protocol as built keeps ${INVARIANTS.join(', ')} (seed ${TEST_EXPLORATION.seed}, ${TEST_EXPLORATION.maxSteps} steps, ${TEST_EXPLORATION.maxSamples} histories)`,
    async () => {
      const result = await protocol;
      expect(verdict(result), result.output).toBe('ok');
      expect(result.output).toContain(`out of ${TEST_EXPLORATION.maxSamples} explored`);
    },
    TIMEOUT_MS,
  );

  test(
    `without the redrive guard it breaks ${MUTANT_BREAKS}`,
    async () => {
      const result = await mutant;
      // Only MUTANT_BREAKS is checked: the violation is of it.
      expect(verdict(result), result.output).toBe('violation');
    },
    TIMEOUT_MS,
  );

  test(
    'the replays pass: the late-write check, the late Write of a poisoned intent, the audit that repairs it and what it misses',
    async () => {
      const result = await replays;
      expect(result.code, result.output).toBe(0);
      expect(passedReplays(result)).toEqual([...REPLAYS]);
    },
    TIMEOUT_MS,
  );
});
