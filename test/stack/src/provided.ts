/** What the global setup hands every test file (through vitest's provide/inject). */
export interface ProvidedStack {
  readonly postgresUrl: string;
  readonly templateDatabase: string;
  readonly openfgaApiUrl: string;
  readonly openfgaPresharedKey: string | undefined;
}

declare module 'vitest' {
  export interface ProvidedContext {
    outboxStack: ProvidedStack;
  }
}
