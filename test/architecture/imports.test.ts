/**
 * The imports between the parts flow one way (docs/design/architecture.md): this reads every
 * import of src/ and checks the rules and that no file reaches itself through its imports.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/** Part → the parts it may never import. */
const NEVER: Record<string, readonly string[]> = {
  protocol: [
    'adapter',
    'sidecar',
    'store',
    'journald',
    'client',
    'cli',
    'log',
    'settings',
    'telemetry',
  ],
  // spans: beside journald, a leaf the programs stand on; only telemetry/otel.ts loads the SDK
  telemetry: ['adapter', 'sidecar', 'store', 'journald', 'client', 'cli', 'log'],
  settings: ['adapter', 'sidecar', 'store', 'journald', 'client', 'cli', 'log'],
  journald: ['adapter', 'sidecar', 'store', 'client', 'cli', 'log', 'settings'],
  store: ['adapter', 'sidecar', 'journald', 'client', 'cli', 'log', 'telemetry'],
  client: ['adapter', 'sidecar', 'store', 'journald', 'cli', 'log', 'settings', 'telemetry'],
  adapter: ['sidecar', 'client', 'cli'],
  sidecar: ['adapter', 'client', 'cli'],
  log: ['adapter', 'sidecar', 'store', 'client', 'cli'],
  cli: ['client'],
  // the console's page and its browser modules: served by the adapter, talking to it over HTTP only
  console: [
    'telemetry',
    'adapter',
    'sidecar',
    'store',
    'journald',
    'client',
    'cli',
    'log',
    'settings',
    'protocol',
  ],
};

/** The .ts files under dir; not a package's build output (src/client/dist, made by its prepack). */
function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? e.name === 'dist' || e.name === 'node_modules'
        ? []
        : files(join(dir, e.name))
      : e.name.endsWith('.ts')
        ? [join(dir, e.name)]
        : [],
  );
}

/** src/adapter/server.ts → adapter; src/log.ts → log. */
function partOf(file: string): string {
  const [first] = relative(SRC, file).split('/');
  return first!.replace(/\.ts$/, '');
}

/** Every module a file names in an import or export (type-only ones too). */
function specifiersOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'";]*?from\s+'([^']+)'/g)].map(
    (m) => m[1]!,
  );
}

/** The src files a file imports (type-only imports too: they are dependencies of the design). */
function importsOf(file: string): string[] {
  return specifiersOf(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => resolve(dirname(file), s).replace(/\.js$/, '.ts'));
}

const all = files(SRC);
const graph = new Map(all.map((f) => [f, importsOf(f)]));

it('every import names a file that exists', () => {
  const missing = [...graph].flatMap(([f, deps]) =>
    deps.filter((d) => !graph.has(d)).map((d) => `${relative(SRC, f)} → ${relative(SRC, d)}`),
  );
  expect(missing).toEqual([]);
  expect(all.length).toBeGreaterThan(40); // the reader found the tree
});

it('no part imports a part it must not', () => {
  const broken: string[] = [];
  for (const [file, deps] of graph) {
    const from = partOf(file);
    const never = NEVER[from];
    expect(never, `no rule for part "${from}"`).toBeDefined();
    for (const d of deps) {
      if (never!.includes(partOf(d))) broken.push(`${relative(SRC, file)} → ${relative(SRC, d)}`);
    }
  }
  expect(broken).toEqual([]);
});

it('no file reaches itself through its imports', () => {
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const visit = (f: string, path: string[]) => {
    if (state.get(f) === 'done') return;
    if (state.get(f) === 'open') {
      cycles.push([...path.slice(path.indexOf(f)), f].map((p) => relative(SRC, p)).join(' → '));
      return;
    }
    state.set(f, 'open');
    for (const d of graph.get(f) ?? []) visit(d, [...path, f]);
    state.set(f, 'done');
  };
  for (const f of all) visit(f, []);
  expect(cycles).toEqual([]);
});

/**
 * Inside store/: a folder → the folders it may never import. rules/ is engine-neutral (pure
 * rules both engines call); neither engine imports the other; the sidecar's SQLite file may use
 * the SQLite helpers (sqlite/sqlite-file.ts) but never PostgreSQL.
 */
const STORE_NEVER: Record<string, readonly string[]> = {
  rules: ['sqlite', 'postgres', 'sidecar'],
  sqlite: ['postgres', 'sidecar'],
  postgres: ['sqlite', 'sidecar'],
  sidecar: ['postgres'],
};

/** src/store/postgres/pg-store.ts → postgres; src/store/store.ts → undefined (top level). */
function storeFolderOf(file: string): string | undefined {
  return /^store\/([a-z]+)\//.exec(relative(SRC, file))?.[1];
}

it('the store engines keep to their folders: neither imports the other, rules/ imports neither', () => {
  const folders = new Set(all.map(storeFolderOf).filter((f) => f !== undefined));
  expect([...folders].sort()).toEqual(Object.keys(STORE_NEVER).sort()); // a new folder needs rules
  const crossed = [...graph].flatMap(([f, deps]) => {
    const never = STORE_NEVER[storeFolderOf(f) ?? ''] ?? [];
    return deps
      .filter((d) => never.includes(storeFolderOf(d) ?? ''))
      .map((d) => `${relative(SRC, f)} → ${relative(SRC, d)}`);
  });
  expect(crossed).toEqual([]);
});

it('the client reaches no package, only Node built-ins: @agent-gateway/client has no dependencies', () => {
  // src/client/tsconfig.json builds the client and what it imports, and nothing else, into the
  // package (docs/reference/client.md): a zod import anywhere in that closure would need zod.
  const reached = new Set<string>();
  const visit = (f: string) => {
    if (reached.has(f)) return;
    reached.add(f);
    for (const d of graph.get(f) ?? []) visit(d);
  };
  for (const f of all.filter((f) => partOf(f) === 'client')) visit(f);
  const packages = [...reached].flatMap((f) =>
    specifiersOf(f)
      .filter((s) => !s.startsWith('.') && !s.startsWith('node:'))
      .map((s) => `${relative(SRC, f)} → ${s}`),
  );
  expect(packages).toEqual([]);
  // the operations' declarations are the client's too: it renders its requests from them
  expect([...reached].map((f) => relative(SRC, f))).toContain('protocol/agent-api.ts');
});

it('store/rules/ is pure: no database driver, no file system', () => {
  const impure = all
    .filter((f) => storeFolderOf(f) === 'rules')
    .flatMap((f) =>
      [...readFileSync(f, 'utf8').matchAll(/from\s+'([^']+)'/g)]
        .map((m) => m[1]!)
        .filter((spec) => /^(pg|better-sqlite3|node:fs|node:fs\/promises)$/.test(spec))
        .map((spec) => `${relative(SRC, f)} → ${spec}`),
    );
  expect(impure).toEqual([]);
});
