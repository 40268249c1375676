import { once } from 'node:events';
import { outboxConsole } from '@outbox/console';
import type { Command } from 'commander';
import Fastify from 'fastify';
import { addTargetOptions, onTargets, type CommandContext, type TargetOptions } from './command-context.js';
import { exitWith, integerArgument } from './command-line.js';
import { docsUrl } from './docs-url.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { checkOpenFga, openFgaConnection } from './openfga-connection.js';

interface ConsoleOptions extends TargetOptions {
  readonly host: string;
  readonly port: number;
  readonly actions?: boolean;
  readonly actor?: string;
}

/** `outbox console`: the agreement console (@outbox/console) on the config's outboxes, until SIGINT or SIGTERM. */
export function defineConsole(command: Command, ctx: CommandContext): Command {
  addTargetOptions(command, ctx, { json: false })
    .summary('serve the agreement console (web pages; read-only unless --actions)')
    .description(
      `Serves the agreement console (${docsUrl('console.md')}) on the config's outboxes and OpenFGA: outboxes, poisoned rows, ` +
        "a partition's timeline, the redrive preview, drift and provenance. Read-only unless --actions; then each action asks for a " +
        'reason, is authorized by an OpenFGA Check of user:<actor> outbox_admin platform:default, and is written to the actions log. ' +
        'Runs until interrupted.',
    )
    .option('--host <address>', 'the address to listen on', '127.0.0.1')
    .option('--port <n>', 'the port to listen on (0: any free one)', integerArgument(0, 65_535), 8484)
    .option('--actions', 'offer redrive, retire, discard and repair (each still authorized)')
    .option(
      '--actor <name>',
      'who acts in every request (a local operator); default: the x-user-id header, set by an authenticating proxy',
    )
    .action(
      exitWith(ctx.box, async (options: ConsoleOptions): Promise<ExitCode> => {
        return onTargets(options, ctx, async (targets, config) => {
          const openfga = config.openfga ? openFgaConnection(config, ctx.io.env, 'console') : undefined;
          if (openfga) await checkOpenFga(openfga);
          const app = Fastify();
          await app.register(outboxConsole, {
            outboxes: targets.map((t) => ({
              name: t.name,
              spec: t.spec,
              db: t.db,
              database: t.database,
              ...(t.owner ? { owner: t.owner } : {}),
            })),
            ...(openfga ? { openfga } : {}),
            ...(options.actor !== undefined ? { actor: () => options.actor } : {}),
            actions: { enabled: options.actions === true },
          });
          const url = await app.listen({ host: options.host, port: options.port });
          ctx.io.stdout.write(
            `${ctx.name} console: ${url}/ (${options.actions ? 'actions enabled, each authorized' : 'read-only'}; ${targets.length} outbox(es)${openfga ? '' : '; no OpenFGA configured'}). Ctrl-C stops it.\n`,
          );
          await Promise.race([once(process, 'SIGINT'), once(process, 'SIGTERM')]);
          await app.close();
          return EXIT.ok;
        });
      }),
    );
  return command;
}
