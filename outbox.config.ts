// The `outbox` command line's config for this repository's six services (docs/cli.md): the specs
// the services enqueue with, their owner mappings for audit and repair, and the variables the
// services read (services/README.md), so `pnpm outbox …` needs the same environment as they do.
import { defineConfig } from '@outbox/cli';
import {
  computeOutbox,
  iamOutbox,
  migrations,
  nlbOutbox,
  registryOutbox,
  storageOutbox,
  vpcOutbox,
} from '@outbox/migrations';
import { computeService, nlbService, registryService, storageService, vpcService } from '@outbox/platform';
import { registerServiceOwner } from '@outbox/service-kit';
import { iamOwner } from '@outbox/service-iam';

export default defineConfig({
  databaseUrl: '$DATABASE_URL',
  openfga: {
    apiUrl: '$OPENFGA_API_URL',
    storeId: '$OPENFGA_STORE_ID',
    authorizationModelId: '${OPENFGA_MODEL_ID:-}',
    apiToken: '${OPENFGA_API_TOKEN:-}',
  },
  migrations: { names: Object.keys(migrations) },
  outboxes: {
    iam: { spec: iamOutbox, owner: iamOwner },
    vpc: { spec: vpcOutbox, owner: registerServiceOwner(vpcService) },
    compute: { spec: computeOutbox, owner: registerServiceOwner(computeService) },
    nlb: { spec: nlbOutbox, owner: registerServiceOwner(nlbService) },
    storage: { spec: storageOutbox, owner: registerServiceOwner(storageService) },
    registry: { spec: registryOutbox, owner: registerServiceOwner(registryService) },
  },
});
