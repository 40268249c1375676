import { loadBalancerTable, nlbOutbox } from '@outbox/migrations';
import { createRegisterService, startService, type RunningService, type ServiceOptions } from '@outbox/service-kit';
import { Type } from 'typebox';

/** The nlb service: `nlb.load_balancers`, OpenFGA type `load_balancer`, routes under `/load-balancers`. */
export const nlbService = createRegisterService({
  name: 'nlb',
  defaultPort: 3003,
  resourceTable: loadBalancerTable,
  fgaType: 'load_balancer',
  outboxSpec: nlbOutbox,
  path: 'load-balancers',
  fields: {
    scheme: Type.Enum(['internal', 'internet-facing'], {
      description: 'where it is reachable from',
      default: 'internal',
    }),
    port: Type.Integer({ description: 'the listener port', minimum: 1, maximum: 65_535 }),
  },
});

/** Starts the nlb service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'nlb'>> {
  return startService(nlbService, options);
}
