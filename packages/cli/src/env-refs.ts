import { CliError } from './cli-error.js';
import { EXIT } from './exit-codes.js';

/** `$$`, `${NAME}`, `${NAME:-fallback}` or `$NAME`. */
const REFERENCE = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g;

/**
 * Replaces the environment references in a config value, as a shell would: `$NAME` and `${NAME}`
 * (required: an unset or empty variable is a config error naming it and the field), `${NAME:-x}`
 * (`x` when unset or empty), `$$` for a literal `$`. Returns undefined when the whole value came
 * out empty (an optional field left unset, e.g. `"${OPENFGA_MODEL_ID:-}"`).
 *
 * @example
 * expandEnv('openfga.storeId', '$OPENFGA_STORE_ID', process.env, 'outbox.config.json');
 */
export function expandEnv(field: string, value: string, env: NodeJS.ProcessEnv, source: string): string | undefined {
  const expanded = value.replace(
    REFERENCE,
    (
      match,
      braced: string | undefined,
      fallback: string | undefined,
      fallbackValue: string | undefined,
      bare: string | undefined,
    ) => {
      if (match === '$$') return '$';
      const name = (braced ?? bare) as string;
      const found = env[name];
      if (found !== undefined && found !== '') return found;
      if (fallback !== undefined) return fallbackValue ?? '';
      throw new CliError(`${source}: ${field}: environment variable ${name} is not set`, `export ${name}`, EXIT.usage);
    },
  );
  return expanded === '' ? undefined : expanded;
}
