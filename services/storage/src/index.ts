import { bucketTable, storageOutbox } from '@outbox/migrations';
import { createRegisterService, startService, type RunningService, type ServiceOptions } from '@outbox/service-kit';
import { Type } from 'typebox';

/** The storage service: `storage.buckets`, OpenFGA type `bucket`, routes under `/buckets`. */
export const storageService = createRegisterService({
  name: 'storage',
  defaultPort: 3004,
  resourceTable: bucketTable,
  fgaType: 'bucket',
  outboxSpec: storageOutbox,
  path: 'buckets',
  fields: {
    storage_class: Type.Enum(['standard', 'infrequent', 'archive'], {
      description: 'a storage class',
      default: 'standard',
    }),
    versioning: Type.Boolean({ description: 'keep every version of an object', default: false }),
  },
});

/** Starts the storage service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'storage'>> {
  return startService(storageService, options);
}
