/**
 * Writes that keep failing on the storage itself, through the real adapter: SQLite's page cap
 * (PRAGMA max_page_count on the store's own connection) at the pages the file has makes every
 * write that needs another page fail with SQLITE_FULL, as a full disk does, portably. After
 * three failed commits in a row /health turns 503 and a CRIT entry (reason `storage`) reaches a
 * real journald; nothing acknowledged is lost; once writes work again /health is 200 and
 * alerts_to gets `alert/storage` counting the failures.
 *
 * The probe that would end the failing state on its own is set far out (storageProbeMs), so the
 * failing state holds while the test looks at it: the first write that commits ends it here.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EMERGENCY_MESSAGE_ID, Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import type { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';

let journal: TestJournal;
let writer: JournalWriter;
let t: TestAdapter;
beforeAll(async () => {
  journal = await startJournal();
  writer = new JournalWriter({ socketPath: journal.socket });
  t = await startTestAdapter(
    {},
    {
      emergencies: new Emergencies(writer, { agentId: 'adapter' }),
      storageProbeMs: 3_600_000,
    },
  );
});
afterAll(async () => {
  await t?.stop();
  writer?.close();
  await journal?.destroy();
});

const big = () =>
  call(t.url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: {
      idempotency_key: randomUUID(),
      to: '@qa',
      kind: 'status',
      payload: { text: 'y'.repeat(200 * 1024) },
    },
  });

it('turns /health to 503 with a CRIT entry when writes keep failing, loses nothing acknowledged, and recovers with an alert', {
  timeout: 60_000,
}, async () => {
  const acked: string[] = [];
  for (let i = 0; i < 3; i++) acked.push(await sendAs(t.url, 'pm', '@qa', 'status', { i }));

  (t.store as SqliteStore).limitPages(1); // no page beyond those the file has
  const failed: Json[] = [];
  for (let i = 0; i < 3; i++) failed.push(await big());
  for (const r of failed) {
    expect(r.status).toBe(503);
    expect(r.body.error).toBe('storage_error'); // retryable: nothing of it was stored
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
  }
  const health = await call(t.url, 'GET', '/health');
  expect(health.status).toBe(503);
  expect(health.body.error).toBe('not_ready');
  expect(health.body.message).toMatch(/^storage: 3 commits in a row failed on the storage/);
  expect(health.body.message).toContain('SQLITE_FULL');

  const crit = await journal.next('AGW_REASON=storage');
  expect(crit).toMatchObject({
    PRIORITY: '2',
    MESSAGE_ID: EMERGENCY_MESSAGE_ID,
    SYSLOG_IDENTIFIER: 'agent-gateway',
    AGW_AGENT_ID: 'adapter',
    AGW_COUNT: '3',
  });
  expect(String(crit.MESSAGE)).toContain('writes keep failing');

  // nothing acknowledged is lost: reads need no new page
  const replay = await call(t.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
  expect(replay.status).toBe(200);
  expect((replay.body.messages as Json[]).map((m) => m.message_id)).toEqual(acked);

  // room again: the first write that commits ends the failing state, and the alert goes out
  (t.store as SqliteStore).limitPages();
  const ok = await big();
  expect(ok.status).toBe(201);
  expect(ok.body.channel_sequence_id).toBe(4); // the failed ones took no number
  expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  const [alert] = await pollAs(t.url, 'orchestrator', { wait: 10, max: 1 });
  expect(alert.message).toMatchObject({
    sender: 'adapter',
    kind: 'alert/storage',
    priority: 'critical',
    payload: { reason: 'write_failures', recipient: 'adapter', count: 3, message_ids: [] },
  });
  const qa = await pollAs(t.url, 'qa', { max: 10 });
  expect(qa.map((d) => d.message.message_id)).toEqual([...acked, ok.body.message_id]);
});
