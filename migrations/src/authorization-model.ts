import { readFileSync } from 'node:fs';
import type { OpenFgaClient, WriteAuthorizationModelRequest } from '@openfga/sdk';
import { transformer } from '@openfga/syntax-transformer';

const MODEL_FILE = new URL('../fga/model.fga', import.meta.url);

/** The platform's authorization model, as the DSL text versioned in `migrations/fga/model.fga`. */
export function authorizationModelDsl(): string {
  return readFileSync(MODEL_FILE, 'utf8');
}

/** The same model in the JSON shape the Write Authorization Model API takes. */
export function authorizationModel(): WriteAuthorizationModelRequest {
  return transformer.transformDSLToJSONObject(authorizationModelDsl()) as unknown as WriteAuthorizationModelRequest;
}

/**
 * Writes the model into the client's store and returns the new model id. OpenFGA models are
 * immutable: every write is a new id, so callers pin the id they got.
 */
export async function writeAuthorizationModel(client: OpenFgaClient): Promise<string> {
  const { authorization_model_id } = await client.writeAuthorizationModel(authorizationModel());
  return authorization_model_id;
}
