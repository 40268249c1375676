import { computeOutbox, instanceTable } from '@outbox/migrations';
import {
  createRegisterService,
  ID_FIELD,
  startService,
  type RunningService,
  type ServiceOptions,
} from '@outbox/service-kit';
import { Type } from 'typebox';

/** The compute service: `compute.instances`, OpenFGA type `instance`, routes under `/instances`. */
export const computeService = createRegisterService({
  name: 'compute',
  defaultPort: 3002,
  resourceTable: instanceTable,
  fgaType: 'instance',
  outboxSpec: computeOutbox,
  path: 'instances',
  fields: {
    machine_type: Type.Enum(['small', 'medium', 'large'], { description: 'a machine type', default: 'small' }),
    image: Type.String({
      description: 'an image like debian-12 or ubuntu:24.04',
      pattern: '^[a-z0-9][a-z0-9._-]{0,63}(:[a-z0-9._-]{1,64})?$',
    }),
    vpc_id: Type.Optional(ID_FIELD),
  },
  references: { vpc_id: { fgaType: 'vpc', relation: 'can_edit' } },
});

/** Starts the compute service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'compute'>> {
  return startService(computeService, options);
}
