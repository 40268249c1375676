import { authorizationModel, migrateToLatest } from '@outbox/migrations';
import { createStackGlobalSetup } from '@outbox/test-stack/global-setup';

// One real Postgres + OpenFGA per run; a template database with every project migration applied.
export default createStackGlobalSetup({ migrate: migrateToLatest, authorizationModel });
