/**
 * `template` with each `{{name}}` replaced by `values[name]`, verbatim. A name without a value
 * throws: a typo in a template must fail the build's tests, not reach a database.
 */
export function expandSqlTemplate(template: string, values: Readonly<Record<string, string>>): string {
  return template.replace(/\{\{([a-z_]+)\}\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`SQL template: no value for {{${name}}}`);
    return value;
  });
}
