/**
 * A database whose pages are broken: PRAGMA quick_check, which runs in the background once the
 * adapter is ready, fails; the adapter says what it found and exits non-zero so the supervisor
 * and the operator see it.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { runCli, spawnAdapter } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { scribbleOverMessages } from '../helpers/scribble.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-qc-');
afterAll(cleanup);

it('a broken page stops the adapter once quick_check ends, with the finding in its log', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'a.db');
  const topology = writeTopology(dir);
  const adapter = await spawnAdapter(['--topology', topology, '--db', db]);
  for (let i = 0; i < 200; i++) {
    await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        idempotency_key: randomUUID(),
        to: 'product',
        kind: 'status',
        payload: { text: 'x'.repeat(2000) },
      },
    });
  }
  adapter.child.kill('SIGTERM');
  expect((await adapter.exited).code).toBe(0);

  // scribble over pages of message rows: they lose their b-tree structure
  scribbleOverMessages(db);

  const res = await runCli([
    'adapter',
    '--topology',
    topology,
    '--db',
    db,
    '--listen',
    '127.0.0.1:0',
  ]);
  expect(res.code).not.toBe(0);
  expect(res.code).not.toBe(null);
  const fatal = res.stdout
    .split('\n')
    .filter((l) => l.includes('"level":60'))
    .map((l) => JSON.parse(l) as { msg: string });
  expect(fatal).toHaveLength(1);
  expect(fatal[0]!.msg).toMatch(/quick_check|malformed|corrupt/i);
  // the pages scribbled over hold message rows, which start and the first sweep do not read
  const ready = res.stdout.indexOf('"msg":"adapter ready');
  expect(ready).toBeGreaterThan(-1);
  expect(ready).toBeLessThan(res.stdout.indexOf('"level":60'));
});
