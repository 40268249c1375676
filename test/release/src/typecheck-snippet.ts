import { join } from 'node:path';
import ts from 'typescript';

/**
 * The type errors of `code` as a module at the repository's root, compiled with the root
 * tsconfig.json (its paths and the `@outbox/source` condition: the public packages' source, no
 * build). The file is virtual: nothing is written, so nothing can be left behind for `pnpm typecheck`.
 */
export function typeErrorsOf(root: string, code: string): string[] {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(root, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new Error(`cannot read ${join(root, 'tsconfig.json')}`);
  // At the root, so that module resolution sees the root's node_modules and package.json ("type": "module").
  const file = join(root, '__snippet__.ts');
  const host = ts.createCompilerHost(parsed.options);
  const { getSourceFile, fileExists, readFile } = host;
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  host.readFile = (name) => (name === file ? code : readFile.call(host, name));
  host.getSourceFile = (name, languageVersion, ...rest) =>
    name === file
      ? ts.createSourceFile(name, code, languageVersion, true)
      : getSourceFile.call(host, name, languageVersion, ...rest);
  const program = ts.createProgram({ rootNames: [file], options: parsed.options, host });
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: ` : '';
    return where + ts.flattenDiagnosticMessageText(d.messageText, '\n');
  });
}
