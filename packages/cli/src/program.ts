import type { Command } from 'commander';
// The bundle inlines it: `--version` is the package's own, from src (tsx) and dist alike.
import manifest from '../package.json' with { type: 'json' };
import { defineActions } from './actions-command.js';
import { defineAudit } from './audit-command.js';
import type { CommandContext } from './command-context.js';
import { defineDiscard, defineRetire } from './close-commands.js';
import { createCommandLine } from './command-line.js';
import { defineCompact } from './compact-command.js';
import { defineConsole } from './console-command.js';
import { defineDoctor } from './doctor-command.js';
import { defineDrain } from './drain-command.js';
import { defineList } from './list-command.js';
import { defineRedrive } from './redrive-command.js';
import { defineRepair } from './repair-command.js';
import { defineShow } from './show-command.js';
import { defineStatus } from './status-command.js';
import { defineToken } from './token-command.js';

/** Every command, in the order `outbox --help` lists them. */
const COMMANDS = {
  status: defineStatus,
  list: defineList,
  show: defineShow,
  token: defineToken,
  drain: defineDrain,
  redrive: defineRedrive,
  retire: defineRetire,
  discard: defineDiscard,
  compact: defineCompact,
  audit: defineAudit,
  repair: defineRepair,
  actions: defineActions,
  console: defineConsole,
  doctor: defineDoctor,
} satisfies Record<string, (command: Command, ctx: CommandContext) => Command>;

/** A command name of the `outbox` program. */
export type CommandName = keyof typeof COMMANDS;

/** The `outbox` program with all its commands. */
export function outboxProgram(ctx: CommandContext): Command {
  const program = createCommandLine(
    ctx.name,
    'Operates @outbox tables: see the backlog, steer it, check agreement with OpenFGA. Exit codes: 0 ok, 1 problem found, 2 usage or configuration, 3 server unreachable.',
    ctx.io,
  ).version(manifest.version, '-V, --version', `print the version of ${manifest.name}`);
  for (const [name, define] of Object.entries(COMMANDS)) define(program.command(name), ctx);
  return program;
}

/** One command as a program of its own (a service's `fga:drain` is `drain` on its outbox). */
export function singleCommandProgram(ctx: CommandContext, name: CommandName): Command {
  return COMMANDS[name](createCommandLine(ctx.name, '', ctx.io), ctx);
}
