export { outboxConsole } from './plugin.js';
export {
  DEFAULT_ADMIN,
  type ConsoleAction,
  type ConsoleAuthorize,
  type ConsoleAuthorizeInput,
  type ConsoleOutbox,
  type OutboxConsoleOptions,
} from './options.js';
export type { ConsoleOpenFga } from './fga.js';
export { CSRF_COOKIE } from './csrf.js';
