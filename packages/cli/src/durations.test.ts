import { InvalidArgumentError } from 'commander';
import { describe, expect, test } from 'vitest';
import { processIo } from './cli-io.js';
import { durationArgument, durationText, formatDuration } from './durations.js';
import { outboxProgram } from './program.js';

// How `compact --retention` reads a duration and says it back.
const DAY = 86_400_000;
const parse = durationArgument(36_500 * DAY);

describe('durations', () => {
  test('reads days, hours, minutes and seconds, in that order, and 0', () => {
    expect(parse('30d')).toBe(30 * DAY);
    expect(parse('1d12h')).toBe(36 * 3_600_000);
    expect(parse('90m')).toBe(5_400_000);
    expect(parse('2h30m15s')).toBe(9_015_000);
    expect(parse('0')).toBe(0);
    expect(parse('36500d')).toBe(36_500 * DAY);
  });

  test('refuses anything else with a usage error', () => {
    for (const value of ['', '30', '30x', '1d1d', '12h1d', '-1d', '1.5d', '36501d', ' 30d']) {
      expect(() => parse(value), value).toThrow(InvalidArgumentError);
    }
  });

  test('says a duration back the way it is read', () => {
    for (const value of ['30d', '1d12h', '1h30m', '2h30m15s', '45s', '0'])
      expect(durationText(parse(value))).toBe(value);
    expect(durationText(90 * 60_000)).toBe('1h30m');
    expect(formatDuration(192)).toBe('3m12s');
  });

  test('every duration option of every command shows its default in --help as it is written, not in milliseconds', () => {
    const program = outboxProgram({ io: processIo(), name: 'outbox', box: { code: 0 }, fixedConfig: undefined });
    const defaults = program.commands.flatMap((command) =>
      command.options
        .filter((o) => o.flags.includes('<duration>') && o.defaultValue !== undefined)
        .map((o) => [`${command.name()} ${o.long}`, o.defaultValueDescription, durationText(o.defaultValue as number)]),
    );
    expect(defaults).toEqual([
      ['token --wait', '0', '0'],
      ['compact --retention', '30d', '30d'],
    ]);
  });
});
