import { Type, type TObject, type TProperties, type TString } from 'typebox';

/** `{ error: { code, message } }`: every error answer (see `errorAnswer`). */
export const ERROR_BODY = Type.Object(
  {
    error: Type.Object({
      code: Type.String({ description: 'stable, machine-readable, e.g. `forbidden`' }),
      message: Type.String({ description: 'what to fix' }),
    }),
  },
  { description: 'An error: nothing was written unless the code says otherwise' },
);

/** The error answers every route of a service may give, for its `response` schema. */
export const ERROR_RESPONSES = { '4xx': ERROR_BODY, '5xx': ERROR_BODY } as const;

/** A timestamp column as it is answered (ISO 8601); a route returns it as pg reads it, a Date. */
export const TIMESTAMP = Type.Unsafe<Date | string>(Type.String({ format: 'date-time' }));

/**
 * The responses of a write that waits for its delivery (see `writeAnswer`): `status` with `properties`
 * once OpenFGA has the intent, 202 with a `note` too while delivery is pending.
 */
export function writeResponses<S extends 200 | 201, P extends TProperties>(
  status: S,
  properties: P,
  description: string,
): { readonly [K in S]: TObject<P> } & { readonly 202: TObject<P & { note: TString }> } & typeof ERROR_RESPONSES {
  const pending = Type.Object(
    { ...properties, note: Type.String({ description: 'why access is not there yet; do not retry the write' }) },
    {
      description: `${description}; committed, its access not yet in OpenFGA (the drainer delivers it)`,
    },
  );
  return { [status]: Type.Object(properties, { description }), 202: pending, ...ERROR_RESPONSES } as never;
}
