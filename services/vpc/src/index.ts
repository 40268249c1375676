import { vpcOutbox, vpcTable } from '@outbox/migrations';
import { createRegisterService, startService, type RunningService, type ServiceOptions } from '@outbox/service-kit';
import { Type } from 'typebox';

/** What is wrong with an IPv4 CIDR block, or undefined. Prefixes /16 to /28, as cloud VPCs take. */
export function cidrProblem(value: string): string | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(value);
  if (!match) return `expected an IPv4 CIDR block like 10.0.0.0/16, got ${JSON.stringify(value)}`;
  const [a, b, c, d, prefix] = match.slice(1).map(Number) as [number, number, number, number, number];
  if ([a, b, c, d].some((octet) => octet > 255)) return `${value}: an octet is above 255`;
  if (prefix < 16 || prefix > 28) return `${value}: the prefix must be from /16 to /28`;
  const address = ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
  const hostBits = 2 ** (32 - prefix) - 1;
  if ((address & hostBits) !== 0)
    return `${value}: host bits are set (the network address of /${prefix} ends in zeros)`;
  return undefined;
}

/** The vpc service: `vpc.vpcs`, OpenFGA type `vpc`, routes under `/vpcs`. */
export const vpcService = createRegisterService({
  name: 'vpc',
  defaultPort: 3001,
  resourceTable: vpcTable,
  fgaType: 'vpc',
  outboxSpec: vpcOutbox,
  path: 'vpcs',
  fields: {
    cidr_block: Type.String({ description: 'an IPv4 CIDR block like 10.0.0.0/16', format: 'ipv4-cidr-block' }),
  },
  formats: { 'ipv4-cidr-block': cidrProblem },
});

/** Starts the vpc service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'vpc'>> {
  return startService(vpcService, options);
}
