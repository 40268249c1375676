import { CredentialsMethod } from '@openfga/sdk';

/** The SDK's credentials for a preshared key (none without one). */
export const credentialsOf = (token: string | undefined) =>
  token ? { credentials: { method: CredentialsMethod.ApiToken as const, config: { token } } } : {};
