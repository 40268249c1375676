export { authorizationModel, authorizationModelDsl, writeAuthorizationModel } from './authorization-model.js';
export { migrateToLatest, migrations, MigrationError } from './migrate.js';
export {
  computeOutbox,
  grantTupleKey,
  IAM_SUPERSEDED_COVERAGE_SQL,
  iamOutbox,
  nlbOutbox,
  registryOutbox,
  storageOutbox,
  vpcOutbox,
} from './specs.js';
export {
  COMMON_RESOURCE_COLUMNS,
  createResourceTable,
  defineResourceTable,
  dropResourceTable,
  type ResourceColumn,
  type ResourceColumnType,
  type ResourceTable,
} from './resource-table.js';
export { bucketTable, instanceTable, loadBalancerTable, repositoryTable, vpcTable } from './tables.js';
export type { IamDatabase, OrganizationTable, ProjectGrantTable, ProjectTable } from './iam-schema.js';
export { drainFunctionsMigration, iamMigration, registerServiceMigration } from './service-migrations.js';
