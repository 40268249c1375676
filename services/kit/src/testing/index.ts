export { recordingLogger, type RecordingLogger } from './recording-logger.js';
export { waitFor } from './wait-for.js';
export {
  readyUrl,
  runScript,
  startPackageScript,
  startServiceProcess,
  type ServiceProcess,
} from './service-process.js';
export { serviceEnv, serviceOptionsFor } from './stack-options.js';
export { smokeTestServiceProcess, type ProcessSmokeTest } from './smoke-register-service.js';
export {
  documentedRequests,
  PLACEHOLDER_ID,
  requestBodyProblems,
  type DocumentedRequest,
  type OpenApiDocument,
} from './documented-requests.js';
