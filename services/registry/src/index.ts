import { registryOutbox, repositoryTable } from '@outbox/migrations';
import { createRegisterService, startService, type RunningService, type ServiceOptions } from '@outbox/service-kit';
import { Type } from 'typebox';

/** The registry service: `registry.repositories`, OpenFGA type `repository`, routes under `/repositories`. */
export const registryService = createRegisterService({
  name: 'registry',
  defaultPort: 3005,
  resourceTable: repositoryTable,
  fgaType: 'repository',
  outboxSpec: registryOutbox,
  path: 'repositories',
  fields: {
    format: Type.Enum(['docker', 'helm', 'npm'], { description: 'the artifact format', default: 'docker' }),
  },
});

/** Starts the registry service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'registry'>> {
  return startService(registryService, options);
}
