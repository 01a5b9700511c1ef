import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { testProjects } from '../projects.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

it('puts every test file in exactly one project: the fast loop or the system tests', () => {
  const walk = (dir: string): string[] =>
    readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory()
        ? walk(join(dir, e.name))
        : e.name.endsWith('.test.ts')
          ? [join(dir, e.name)]
          : [],
    );
  const { fast, system } = testProjects(root);
  expect([...fast, ...system].sort()).toEqual(walk('test').sort());
  expect(fast.filter((f) => system.includes(f))).toEqual([]);
});

it('keeps what starts processes, a database server or reads the build out of the fast loop', () => {
  const { fast, system } = testProjects(root);
  // child processes (directly, and through the replicas helper that spawns adapters)
  expect(system).toContain('test/chaos/soak.test.ts');
  expect(system).toContain('test/replicas/sweeps-run-once.test.ts');
  // a real journald
  expect(system).toContain('test/sidecar/readiness.test.ts');
  // the built client
  expect(system).toContain('test/store/durability.test.ts');
  // in-process over loopback
  expect(fast).toContain('test/adapter/inbox.test.ts');
  expect(fast).toContain('test/sidecar/circuit-breaker.test.ts');
});
