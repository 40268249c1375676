/** A JSON schema as a route declares it (TypeBox builds plain JSON Schema objects). */
type Schema = Record<string, unknown>;

const isSchema = (value: unknown): value is Schema =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * `schema` with every property that has a `default` left out of its object's `required`, at any
 * depth: the validator fills a default in (`useDefaults`), so the client may omit the field, and the
 * OpenAPI document must say so. TypeBox lists such a property as required unless each field says
 * `Type.Optional`; this makes the rule one place instead. The input is not changed.
 *
 * @example
 * optionalDefaults(Type.Object({ name: Type.String(), versioning: Type.Boolean({ default: false }) })).required; // ['name']
 */
export function optionalDefaults<S>(schema: S): S {
  if (Array.isArray(schema)) return schema.map((item: unknown) => optionalDefaults(item)) as S;
  if (!isSchema(schema)) return schema;
  const copy: Schema = Object.fromEntries(
    Object.entries(schema).map(([key, value]) => [
      key,
      // A default value or an example is data, not a schema.
      key === 'default' || key === 'examples' || key === 'const' || key === 'enum' ? value : optionalDefaults(value),
    ]),
  );
  const properties = copy.properties;
  if (Array.isArray(copy.required) && isSchema(properties)) {
    copy.required = copy.required.filter((name) => {
      const property = properties[name as string];
      return !(isSchema(property) && 'default' in property);
    });
  }
  return copy as S;
}
