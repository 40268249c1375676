export { runOutboxCli, type RunOutboxCliOptions } from './run-outbox-cli.js';
export {
  defineConfig,
  type MigrationsCheck,
  type OpenFgaConfig,
  type OutboxCliConfig,
  type OutboxEntry,
} from './config.js';
export { OPENFGA_ENV_CONFIG } from './command-context.js';
export { EXIT, type ExitCode } from './exit-codes.js';
export { CliError } from './cli-error.js';
export { explainError, isUnreachable, networkReason } from './explain-error.js';
export { maskUrl } from './mask-url.js';
export { processIo, type CliIo } from './cli-io.js';
export { createCommandLine, exitWith, integerArgument, runCommandLine, type ExitBox } from './command-line.js';
export { OUTPUT_SCHEMAS } from './output-schemas.js';
export type { CommandName } from './program.js';
export { outboxStatus, type StatusTarget } from '@outbox/reconciler';
export { statusTable } from './status-command.js';
export type { StatusOutbox } from './output-schemas.js';
