/**
 * docs/reference/events.md lists each program's events: held to the event maps' types, read
 * with the TypeScript compiler, as errors-documented.test.ts holds errors.md to the catalogue.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const doc = readFileSync(new URL('docs/reference/events.md', root), 'utf8');

/** The first column of the table under a `## ` heading. */
function documented(heading: string): string[] {
  const start = doc.indexOf(`## ${heading}`);
  expect(start, `events.md has a section "${heading}"`).toBeGreaterThanOrEqual(0);
  const end = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/^\| `([a-z:-]+)` \|/gm)].map((m) => m[1]!).sort();
}

/** The property names of an exported interface, inherited ones included. */
function declared(file: string, name: string): string[] {
  const path = fileURLToPath(new URL(file, root));
  const program = ts.createProgram([path], {
    strict: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(path)!;
  const symbol = checker
    .getExportsOfModule(checker.getSymbolAtLocation(source)!)
    .find((s) => s.name === name);
  expect(symbol, `${file} exports ${name}`).toBeDefined();
  return checker
    .getDeclaredTypeOfSymbol(symbol!)
    .getProperties()
    .map((p) => p.name)
    .sort();
}

it('documents every adapter event, and nothing stale', () => {
  const events = declared('src/adapter/events.ts', 'AdapterEvents');
  expect(events).toContain('commit');
  expect(documented("The adapter's events")).toEqual(events);
});

it('documents every sidecar event, and nothing stale', () => {
  const events = declared('src/sidecar/events.ts', 'SidecarEvents');
  expect(events).toContain('breaker');
  expect(documented("The sidecar's events")).toEqual(events);
});
