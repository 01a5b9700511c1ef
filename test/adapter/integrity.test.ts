/**
 * Integrity: one byte of a stored payload flipped in the database file while the adapter is
 * stopped. SQLite's own quick_check cannot see it (the page is well-formed); the per-message
 * checksum does. The corrupt message is quarantined: never served (not by the inbox, not by
 * replay, not in the dead letters), its delivery dead-lettered with reason `integrity`, an
 * `alert/integrity` to alerts_to and a CRIT entry (reason `integrity`) in a real journald; the
 * recipient's inbox goes on with the next messages of the same channel, and /health stays 200.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EMERGENCY_MESSAGE_ID } from '../../src/journald/emergency.js';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-integrity-');
let journal: TestJournal;
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

const send = async (url: string, text: string): Promise<string> => {
  const r = await call(url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { text } },
  });
  expect(r.status).toBe(201);
  return r.body.message_id as string;
};

it('a flipped byte is quarantined while the rest of the inbox flows, and /health stays 200', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'a.db');
  const args = ['--topology', writeTopology(dir), '--db', db];
  const env = { AGW_JOURNAL_SOCKET: journal.socket };
  let adapter: ChildAdapter | undefined = await spawnAdapter(args, env);
  try {
    const marker = 'MARKER-7d1e0c55-payload';
    const before = await send(adapter.url, 'first');
    const corrupt = await send(adapter.url, marker);
    const after = [await send(adapter.url, 'third'), await send(adapter.url, 'fourth')];
    adapter.child.kill('SIGTERM'); // a clean stop checkpoints the WAL into the main file
    expect((await adapter.exited).code).toBe(0);

    const bytes = readFileSync(db);
    const at = bytes.indexOf(marker);
    expect(at).toBeGreaterThan(0);
    expect(bytes.indexOf(marker, at + 1)).toBe(-1); // one copy: the message row's
    bytes[at] = bytes[at]! ^ 0x01; // 'M' becomes 'L'
    writeFileSync(db, bytes);

    adapter = await spawnAdapter(args, env); // quick_check passes: the page itself is sound
    // the inbox hands over the message before it, then the ones after it, in order, one poll
    // and one ack each (strict order: the next of a channel only once the last is acked)
    const handed: Json[] = [];
    for (let i = 0; i < 10 && handed.length < 3; i++) {
      const got = await pollAs(adapter.url, 'qa', { wait: 5, max: 1 });
      handed.push(...got);
      const acked = await call(adapter.url, 'POST', '/v1/acks', {
        agent: 'qa',
        body: { delivery_ids: got.map((d) => d.delivery_id) },
      });
      expect(acked.body.acked).toHaveLength(got.length);
    }
    expect(handed.map((d) => d.message.message_id)).toEqual([before, ...after]);
    expect(JSON.stringify(handed)).not.toContain('LARKER');

    // replay skips it; the rest of the channel is served
    const replay = await call(adapter.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
    expect(replay.status).toBe(200);
    expect((replay.body.messages as Json[]).map((m) => m.message_id)).toEqual([before, ...after]);
    expect(JSON.stringify(replay.body)).not.toContain('LARKER');

    // a corrupt row is not an outage
    expect((await call(adapter.url, 'GET', '/health')).status).toBe(200);

    // its delivery is a dead letter, reason integrity, without the corrupt bytes
    const dead = await call(adapter.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' });
    expect(dead.body.dead_letters).toMatchObject([
      { reason: 'integrity', recipient: 'qa', message: null },
    ]);

    // alerts_to is told, and the out-of-band channel too
    const [alert] = await pollAs(adapter.url, 'orchestrator', { wait: 5, max: 1 });
    expect(alert.message).toMatchObject({
      kind: 'alert/integrity',
      payload: { reason: 'integrity', recipient: 'qa', count: 1, message_ids: [corrupt] },
    });
    const crit = await journal.next('AGW_REASON=integrity');
    expect(crit).toMatchObject({
      PRIORITY: '2',
      MESSAGE_ID: EMERGENCY_MESSAGE_ID,
      AGW_AGENT_ID: 'adapter',
      AGW_RECIPIENT: 'qa',
      AGW_MESSAGE_IDS: corrupt,
    });
    expect(String(crit.MESSAGE)).toContain('quarantined');
    expect(adapter.lines.join('\n')).toContain('integrity');
  } finally {
    adapter?.child.kill('SIGKILL');
    await adapter?.exited;
  }
});
