export { authorizationModel, authorizationModelDsl, writeAuthorizationModel } from './authorization-model.js';
export { migrateToLatest, migrations } from './migrate.js';
