export {
  createRegisterService,
  type RegisterServiceConfig,
  type RegisterServiceDefinition,
} from './register-service.js';
export { registerServiceOwner, registrationTuples, resourceObject } from './register-owner.js';
export { startService, type RunningService, type ServiceContext, type ServiceDefinition } from './service.js';
export { startServices, type RunningServices, type StartServicesOptions } from './start-services.js';
export { runServiceMain, runServicesMain } from './run-main.js';
export { runDrainOnceMain } from './drain-once-main.js';
export {
  databaseTarget,
  inEnvironmentTerms,
  openFgaConnectionFromEnv,
  resolveServiceOptions,
  SERVICE_ENV,
  serviceOptionsFromEnv,
  type ResolvedServiceOptions,
  type ServiceOptions,
} from './service-options.js';
export {
  createServiceLogger,
  outboxLogger,
  type ServiceLoggerOptions,
  type ServiceLogLevel,
} from './service-logger.js';
export { createServiceOutbox, type Delivery, type ServiceOutbox, type ServiceOutboxConfig } from './service-outbox.js';
export {
  AUTHORIZATION_TIMEOUT_MS,
  createAuthorizer,
  LIST_TIMEOUT_MS,
  type Authorizer,
  type OpenFgaConnection,
} from './authorizer.js';
export {
  REQUEST_ID_HEADER,
  startHttpServer,
  type HttpServer,
  type HttpServerOptions,
  type ServiceApp,
} from './http-server.js';
export { MAX_BODY_BYTES } from './json-body.js';
export type { ErrorBody } from './error-answer.js';
export {
  createReadiness,
  READY_CHECK_TIMEOUT_MS,
  type OutboxReadinessCheck,
  type ReadinessCheck,
  type ReadinessConfig,
  type ReadinessReport,
} from './readiness.js';
export { CALLER_HEADER, callerOf } from './caller.js';
export { serviceClient, type ServiceClient, type ServiceReply } from './service-client.js';
export {
  ID_DESCRIPTION,
  ID_FIELD,
  ID_PATTERN,
  NAME_FIELD,
  shownValue,
  type FieldSchemas,
  type FormatCheck,
} from './field-schemas.js';
export { ERROR_BODY, ERROR_RESPONSES, TIMESTAMP, writeResponses } from './response-schemas.js';
export { writeAnswer } from './write-answer.js';
export { findById } from './find-by-id.js';
export { resourceTableColumns, verifyServiceTables, type ExpectedTable } from './verify-tables.js';
export { createServicePool } from './pool.js';
export { HttpError, SERVICE_SQLSTATE, ServiceConfigError } from './errors.js';
