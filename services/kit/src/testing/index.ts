export { recordingLogger, type RecordingLogger } from './recording-logger.js';
export { waitFor } from './wait-for.js';
export { runScript, startPackageScript, startServiceProcess, type ServiceProcess } from './service-process.js';
export { serviceEnv, serviceOptionsFor } from './stack-options.js';
export { smokeTestServiceProcess, type ProcessSmokeTest } from './smoke-register-service.js';
