/**
 * The house's one-way doors (docs/DESIGN.md §1), checked on every relative import under src/: a
 * room imports only rooms below it, and no two modules import each other (directly or round a
 * longer loop). A door that runs back up makes this test name it.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

const SRC = path.resolve(import.meta.dirname, '../../src');

/**
 * Lowest first. A room may import its own modules and any room on an earlier line; rooms on one
 * line do not import each other. Top-level files are rooms of their own (`app` is src/app.ts).
 */
export const LAYERS: readonly (readonly string[])[] = [
  ['util', 'errors', 'types', 'generated'],
  ['config'],
  ['routing'],
  ['state'],
  ['request'],
  ['signals'],
  ['gate'],
  ['health'],
  ['telemetry'],
  ['extproc', 'admin'],
  ['app'],
  ['sim'],
  ['fake-worker'],
  ['bench'],
  ['demo'],
  ['cli'],
];

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = path.join(dir, e);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

function room(file: string): string {
  const parts = path.relative(SRC, file).split(path.sep);
  return parts.length === 1 ? parts[0]!.replace(/(\.d)?\.ts$/, '') : parts[0]!;
}

/** Every module's relative imports (static, re-exports and dynamic), resolved to files. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const text = readFileSync(file, 'utf8');
    const targets = [...text.matchAll(/(?:\bfrom|\bimport)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) => path.resolve(path.dirname(file), m[1]!.replace(/\.js$/, '.ts')));
    graph.set(file, targets);
  }
  return graph;
}

test('every room imports only rooms below it', () => {
  const level = new Map<string, number>();
  LAYERS.forEach((rooms, i) => rooms.forEach((r) => level.set(r, i)));
  const graph = importGraph();
  const unknown = new Set<string>();
  const backDoors: string[] = [];
  for (const [file, targets] of graph) {
    const from = room(file);
    for (const target of targets) {
      const to = room(target);
      if (to === from) continue;
      const a = level.get(from);
      const b = level.get(to);
      if (a === undefined) unknown.add(from);
      if (b === undefined) unknown.add(to);
      if (a !== undefined && b !== undefined && b >= a) backDoors.push(`${path.relative(SRC, file)} → ${path.relative(SRC, target)} (${from} may not import ${to})`);
    }
  }
  assert.deepEqual([...unknown], [], 'every room has a place in LAYERS');
  assert.ok(graph.size > 100, `read ${graph.size} modules`);
  assert.deepEqual(backDoors, []);
});

test('no two modules import each other, directly or round a loop', () => {
  // Generated protobuf types are recursive by nature (Struct holds Values that hold Structs).
  const graph = new Map([...importGraph()].filter(([file]) => room(file) !== 'generated'));
  // Tarjan's strongly connected components: any with more than one module is a loop.
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const loops: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(path.relative(SRC, w));
      } while (w !== v);
      if (component.length > 1) loops.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  assert.deepEqual(loops, []);
});

test('routing names workers by their ids only: no Envoy cluster names in the policy or its types', () => {
  const found: string[] = [];
  for (const file of sources(path.join(SRC, 'routing'))) {
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (/\.cluster\b|\bcluster\??\s*:/.test(line)) found.push(`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(found, []);
});
