export { recordingLogger, type LogEntry, type RecordingLogger } from '@outbox/test-stack';
