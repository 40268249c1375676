import { readdirSync, readFileSync } from 'node:fs';

/** One process as Linux's `/proc/<pid>/stat` describes it. */
export interface ProcessStat {
  readonly pid: number;
  /** The command name (`comm`), at most 15 characters. */
  readonly name: string;
  /** `R`, `S`, `D`, `Z` (zombie), … */
  readonly state: string;
  readonly parent: number;
  /** User plus system CPU time so far, in ms. */
  readonly cpuMs: number;
  /**
   * The same of its children that ended and were waited for, in ms (a postmaster's backends that
   * closed: their own /proc entries are gone).
   */
  readonly childrenCpuMs: number;
}

const TICK_MS = 1000 / 100; // USER_HZ is 100 on Linux

/** The process `pid`, or undefined when it is gone (or there is no /proc). */
export function processStat(pid: number): ProcessStat | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The name is in parentheses and may itself hold spaces or parentheses: split after the last ')'.
  const close = stat.lastIndexOf(')');
  const fields = stat.slice(close + 2).split(' ');
  return {
    pid,
    name: stat.slice(stat.indexOf('(') + 1, close),
    state: fields[0] ?? '',
    parent: Number(fields[1]),
    cpuMs: (Number(fields[11]) + Number(fields[12])) * TICK_MS,
    childrenCpuMs: (Number(fields[13]) + Number(fields[14])) * TICK_MS,
  };
}

/** Every process this one can see in /proc (none where there is no /proc). */
export function processes(): ProcessStat[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  return entries.flatMap((entry) => (/^\d+$/.test(entry) ? (processStat(Number(entry)) ?? []) : []));
}
