import { readFileSync } from 'node:fs';

/** Objects of one kind in a heap snapshot: `(type) name` (the constructor for objects), their count and self size. */
export interface HeapGroup {
  readonly kind: string;
  readonly count: number;
  readonly bytes: number;
}

interface Snapshot {
  readonly snapshot: {
    readonly meta: { readonly node_fields: string[]; readonly node_types: [string[], ...unknown[]] };
  };
  readonly nodes: number[];
  readonly strings: string[];
}

/**
 * Groups the nodes of a V8 `.heapsnapshot` by type and name (objects by constructor, strings and
 * code by type alone) with their counts and self sizes: what the heap is made of.
 */
export function heapGroups(path: string): Map<string, HeapGroup> {
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as Snapshot;
  const fields = parsed.snapshot.meta.node_fields;
  const types = parsed.snapshot.meta.node_types[0];
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [
    number,
    number,
    number,
  ];
  const groups = new Map<string, { count: number; bytes: number }>();
  for (let i = 0; i < parsed.nodes.length; i += fields.length) {
    const type = types[parsed.nodes[i + typeAt] as number] ?? '?';
    const named = type === 'object' || type === 'closure' || type === 'native';
    const kind = named ? `(${type}) ${parsed.strings[parsed.nodes[i + nameAt] as number]}` : `(${type})`;
    const group = groups.get(kind) ?? { count: 0, bytes: 0 };
    group.count += 1;
    group.bytes += parsed.nodes[i + sizeAt] as number;
    groups.set(kind, group);
  }
  return new Map([...groups].map(([kind, g]) => [kind, { kind, ...g }]));
}
