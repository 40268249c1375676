// What a service author uses: define a service, start it, answer its routes, run it as a process.
// The rest of the kit (its options, logger, outbox, authorizer, readiness, HTTP server) is reached
// through these; import a file directly only inside the kit.
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
export { serviceOptionsFromEnv, type ServiceOptions } from './service-options.js';
export type { Authorizer, ReadConsistency } from './authorizer.js';
export { CONSISTENCY_HEADER, TOKEN_HEADER } from './read-consistency.js';
export type { ServiceApp } from './http-server.js';
export { serviceClient, type ServiceClient, type ServiceReply } from './service-client.js';
export { ID_FIELD, NAME_FIELD } from './field-schemas.js';
export { ERROR_RESPONSES, TIMESTAMP, writeResponses } from './response-schemas.js';
export { writeAnswer } from './write-answer.js';
export { findById } from './find-by-id.js';
export { createServicePool } from './pool.js';
export { HttpError, ServiceConfigError } from './errors.js';
