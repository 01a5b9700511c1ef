/**
 * The CRIT entries the adapter's command writes when it cannot go on at start, read back from a
 * real journald: a store that cannot be opened (reason `storage`), and a store that fails
 * PRAGMA quick_check once ready (reason `integrity`). Either way the program exits 1 and says
 * why at fatal in its log.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EMERGENCY_MESSAGE_ID } from '../../src/journald/emergency.js';
import { runCli, spawnAdapter } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { scribbleOverMessages } from '../helpers/scribble.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-startcrit-');
let journal: TestJournal;
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

const fatalLines = (stdout: string) =>
  stdout
    .split('\n')
    .filter((l) => l.includes('"level":60'))
    .map((l) => JSON.parse(l) as { msg: string });

it('a store that cannot be opened: exit 1 and a CRIT entry with reason storage', {
  timeout: 30_000,
}, async () => {
  const db = join(dir, 'not-a-database.db');
  writeFileSync(db, Buffer.alloc(8192, 0x41)); // 8 KiB of "A": no SQLite header
  const res = await runCli(
    ['adapter', '--topology', writeTopology(dir), '--db', db, '--listen', '127.0.0.1:0'],
    { AGW_JOURNAL_SOCKET: journal.socket },
  );
  expect(res.code).toBe(1);
  expect(fatalLines(res.stdout).map((l) => l.msg)).toEqual([
    expect.stringMatching(/^adapter cannot start: its store cannot be opened: .*not a database/),
  ]);
  const crit = await journal.next('AGW_REASON=storage');
  expect(crit).toMatchObject({
    PRIORITY: '2',
    MESSAGE_ID: EMERGENCY_MESSAGE_ID,
    SYSLOG_IDENTIFIER: 'agent-gateway',
    AGW_AGENT_ID: 'adapter',
    AGW_DB: db,
  });
  expect(String(crit.MESSAGE)).toMatch(/store cannot be opened: .*not a database/);
});

it('a store that fails quick_check: exit 1 and a CRIT entry with reason integrity', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'broken.db');
  const topology = writeTopology(dir);
  const adapter = await spawnAdapter(['--topology', topology, '--db', db]);
  for (let i = 0; i < 200; i++) {
    const r = await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        idempotency_key: randomUUID(),
        to: 'product',
        kind: 'status',
        payload: { text: 'x'.repeat(2000) },
      },
    });
    expect(r.status).toBe(201);
  }
  adapter.child.kill('SIGTERM');
  expect((await adapter.exited).code).toBe(0);
  // scribble over pages of message rows: they lose their b-tree structure
  scribbleOverMessages(db);

  const res = await runCli(
    ['adapter', '--topology', topology, '--db', db, '--listen', '127.0.0.1:0'],
    { AGW_JOURNAL_SOCKET: journal.socket },
  );
  expect(res.code).toBe(1);
  const crit = await journal.next('AGW_REASON=integrity');
  expect(crit).toMatchObject({
    PRIORITY: '2',
    MESSAGE_ID: EMERGENCY_MESSAGE_ID,
    AGW_AGENT_ID: 'adapter',
  });
  expect(String(crit.MESSAGE)).toMatch(/^adapter store failed its integrity check: .*quick_check/);
  expect(fatalLines(res.stdout)).toHaveLength(1);
});
