/**
 * Two projects (test/projects.ts): `fast`, in-process and loopback only (`npm run test:fast`),
 * and `system`, what starts processes, servers or reads the build. `npm test` runs both.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { testProjects } from './projects.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const { fast, system } = testProjects(root);

export default defineConfig({
  test: {
    root,
    projects: [
      { extends: true, test: { name: 'fast', include: fast } },
      { extends: true, test: { name: 'system', include: system } },
    ],
  },
});
