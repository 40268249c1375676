import { startServices, type RunningServices, type StartServicesOptions } from '@outbox/service-kit';
import { computeService } from '@outbox/service-compute';
import { iamService } from '@outbox/service-iam';
import { nlbService } from '@outbox/service-nlb';
import { registryService } from '@outbox/service-registry';
import { storageService } from '@outbox/service-storage';
import { vpcService } from '@outbox/service-vpc';

/** The five register services, in the order of their migrations. */
export const registerServices = [vpcService, computeService, nlbService, storageService, registryService] as const;

/** All six services of the platform. */
export const platformServices = [iamService, ...registerServices] as const;

/** `iam` | `vpc` | `compute` | `nlb` | `storage` | `registry`. */
export type PlatformServiceName = (typeof platformServices)[number]['name'];

/** The six services running in this process. */
export type RunningPlatform = RunningServices<PlatformServiceName>;

/**
 * Starts all six services in this process, each on a free port (127.0.0.1), with its drainer
 * (LISTEN on) and reconciler on their timers. The database must be migrated (`migrateToLatest`
 * from @outbox/migrations, or `pnpm migrate`) and the store must hold the model.
 *
 * @example
 * const platform = await startAllServices({ databaseUrl, openfga: { apiUrl, storeId, authorizationModelId } });
 * const iam = serviceClient(platform.urls.iam).as('alice');
 * await iam.post('/organizations', { name: 'acme' });
 * console.log(await platform.stats());                       // outbox counts per service
 * await platform.services.vpc.outbox.redrive();             // one redrive pass now
 * await platform.services.iam.onModelChanged();              // after a model change
 * await platform.stop();
 */
export function startAllServices(options: StartServicesOptions): Promise<RunningPlatform> {
  return startServices(platformServices, options);
}

export { computeService, iamService, nlbService, registryService, storageService, vpcService };
