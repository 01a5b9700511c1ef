/**
 * Which tests are fast: in-process and over loopback only, no build needed. A test is a system
 * test when it (or a test helper it imports) starts child processes, a journald, a PostgreSQL
 * server or replicas, or reads the built package (dist/): those need `npm run build`, Podman's
 * or PostgreSQL's machinery, or seconds of real time. `npm run test:fast` runs the rest; `npm
 * test` runs both. Decided from the files' text, so a new test lands in the right place itself.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** What marks a file, or a helper it imports, as a system test. */
const SYSTEM = [/from 'node:child_process'/, /\/dist\//, /agent-gateway\/client/, /from 'pg'/];

/** The helpers a file imports, by name (test/helpers/NAME.ts). */
const helpersOf = (text: string) =>
  [...text.matchAll(/(?:helpers|\.)\/([a-z-]+)\.js'/g)].map((m) => m[1]!);

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    !e.isDirectory()
      ? [join(dir, e.name)]
      : e.name === 'node_modules' || e.name === 'dist'
        ? []
        : files(join(dir, e.name)),
  );
}

/** The test files of `root`/test, split into fast and system, as paths relative to `root`. */
export function testProjects(root: string): { fast: string[]; system: string[] } {
  // a helper is a system one by its own text or by a system helper it imports (to a fixed point)
  const helperText = new Map(
    files(join(root, 'test', 'helpers'))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => [f.slice(f.lastIndexOf('/') + 1, -3), readFileSync(f, 'utf8')]),
  );
  const systemHelpers = new Set<string>();
  for (let grew = true; grew; ) {
    grew = false;
    for (const [name, text] of helperText) {
      if (systemHelpers.has(name)) continue;
      if (SYSTEM.some((re) => re.test(text)) || helpersOf(text).some((h) => systemHelpers.has(h))) {
        systemHelpers.add(name);
        grew = true;
      }
    }
  }
  const fast: string[] = [];
  const system: string[] = [];
  for (const file of files(join(root, 'test')).filter((f) => f.endsWith('.test.ts'))) {
    const text = readFileSync(file, 'utf8');
    const rel = relative(root, file);
    const slow =
      rel.startsWith('test/chaos/') ||
      SYSTEM.some((re) => re.test(text)) ||
      helpersOf(text).some((h) => systemHelpers.has(h));
    (slow ? system : fast).push(rel);
  }
  return { fast: fast.sort(), system: system.sort() };
}
