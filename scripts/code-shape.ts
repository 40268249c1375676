// Prints the shape figures a layout change is judged by: source files, internal import arrows and
// circles per package, exported names per package entry, and source lines over 120 characters.
// Usage: node --import tsx scripts/code-shape.ts [repo-root]
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(process.argv[2] ?? '.');
const packageDirs = ['packages', 'services']
  .flatMap((group) => readdirSync(join(root, group)).map((name) => join(root, group, name)))
  .filter((dir) => existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'src')));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : sourceFiles(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

const isTest = (path: string) => /\.(e2e\.)?test\.ts$/.test(path) || path.includes('/testing/');
const importPattern = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/g;

function arrows(files: string[]): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  for (const file of files) {
    const targets = new Set<string>();
    for (const match of readFileSync(file, 'utf8').matchAll(importPattern)) {
      const target = resolve(dirname(file), match[1]!.replace(/\.js$/, '.ts'));
      if (files.includes(target)) targets.add(target);
    }
    graph.set(file, targets);
  }
  return graph;
}

function circles(graph: Map<string, Set<string>>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') found.push(stack.slice(stack.indexOf(next)));
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node);
  return found;
}

function exportedNames(entry: string): number {
  const program = ts.createProgram([entry], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const symbol = checker.getSymbolAtLocation(program.getSourceFile(entry)!);
  return symbol ? checker.getExportsOfModule(symbol).length : 0;
}

function entries(dir: string): Array<[string, string]> {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    exports?: Record<string, { '@outbox/source'?: string; default?: string } | string>;
  };
  return Object.entries(manifest.exports ?? {}).flatMap(([name, target]) => {
    const source = typeof target === 'object' ? (target['@outbox/source'] ?? target.default) : target;
    return source?.endsWith('.ts') ? [[name, join(dir, source)] as [string, string]] : [];
  });
}

let totalFiles = 0;
let totalArrows = 0;
let totalLong = 0;
console.log('package\tfiles\tarrows\tcircles\tlines>120\tentry exports');
for (const dir of packageDirs) {
  const all = sourceFiles(join(dir, 'src'));
  const shipped = all.filter((file) => !isTest(file));
  const graph = arrows(shipped);
  const arrowCount = [...graph.values()].reduce((sum, targets) => sum + targets.size, 0);
  const long = all.reduce(
    (sum, file) =>
      sum +
      readFileSync(file, 'utf8')
        .split('\n')
        .filter((line) => line.length > 120).length,
    0,
  );
  const exportsText = entries(dir)
    .map(([name, entry]) => `${name}=${exportedNames(entry)}`)
    .join(' ');
  const circleText = circles(graph)
    .map((circle) => circle.map((file) => relative(join(dir, 'src'), file)).join('→'))
    .join('; ');
  totalFiles += shipped.length;
  totalArrows += arrowCount;
  totalLong += long;
  console.log(`${relative(root, dir)}\t${shipped.length}\t${arrowCount}\t${circleText || 0}\t${long}\t${exportsText}`);
}
console.log(`total\t${totalFiles}\t${totalArrows}\t\t${totalLong}`);
