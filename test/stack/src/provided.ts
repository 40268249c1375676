/** What the global setup hands every test file (through vitest's provide/inject). */
import type { WriteAuthorizationModelRequest } from '@openfga/sdk';

export interface ProvidedStack {
  readonly postgresUrl: string;
  readonly templateDatabase: string;
  readonly openfgaApiUrl: string;
  readonly openfgaPresharedKey: string | undefined;
  /** The project's authorization model (JSON), written into every store a test creates. */
  readonly authorizationModel: WriteAuthorizationModelRequest;
}

declare module 'vitest' {
  export interface ProvidedContext {
    outboxStack: ProvidedStack;
  }
}
