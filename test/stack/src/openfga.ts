// `@outbox/test-stack/openfga`: reading tuples back from a real store, and a refusing token issuer.
export { stored, storedOn, tupleKey, type TupleKeyText } from './openfga-tuples.js';
export { clientCredentials, startRefusingTokenIssuer, type RefusingTokenIssuer } from './token-issuer.js';
