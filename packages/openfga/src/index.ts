export {
  createOpenFgaSink,
  OPENFGA_SINK_DEFAULTS,
  type OpenFgaSink,
  type OpenFgaSinkClientConfig,
  type OpenFgaSinkConfig,
  type OpenFgaSinkConnectionConfig,
  type OpenFgaSinkOptions,
} from './openfga-sink.js';
export { OpenFgaSinkConfigError, OpenFgaWriteError } from './errors.js';
export type { OpenFgaWriteClient, OpenFgaWriteEvent } from './write-request.js';
export {
  createOpenFgaTupleReader,
  OpenFgaReadError,
  type OpenFgaChangePage,
  type OpenFgaReadClient,
  type OpenFgaTuplePage,
  type OpenFgaTupleReader,
  type OpenFgaTupleReaderConfig,
} from './tuple-reader.js';
