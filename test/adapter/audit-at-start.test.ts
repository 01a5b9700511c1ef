/**
 * The audit chain checked when the adapter starts (server.ts wires adapter/audit-check.ts): an
 * entry changed behind the store's back while the adapter was stopped is an alert/integrity to
 * the alerts_to agent naming its seq, and the adapter goes on serving (/health 200) and
 * appending after the break.
 */
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { until } from '../helpers/wait.js';

const OP = 'operator:alice';

it('tells a changed audit entry at start and goes on serving', async () => {
  const first = await startTestAdapter();
  await call(first.url, 'POST', '/v1/agents/growth/pause', { agent: OP });
  await call(first.url, 'POST', '/v1/agents/growth/resume', { agent: OP });
  await first.adapter.close();
  // start, pause, resume, stop: the pause (seq 2) is made to look like another operator's
  const db = new Database(first.db);
  const changed = db.prepare("UPDATE audit_log SET actor = 'operator:mallory' WHERE seq = 2").run();
  db.close();
  expect(changed.changes).toBe(1);

  const again = await startTestAdapter({ db: first.db });
  try {
    expect((await call(again.url, 'GET', '/health')).status).toBe(200);
    let alert: Json;
    await until(async () => {
      const r = await call(again.url, 'GET', '/v1/inbox?wait=1&max=10', { agent: 'orchestrator' });
      alert = r.body.deliveries?.find((d: Json) => d.message.kind === 'alert/integrity');
      return alert !== undefined;
    }, 'an alert/integrity to orchestrator');
    expect(alert.message.payload).toMatchObject({
      reason: 'audit_chain',
      message_ids: ['audit:2:changed'],
    });
    expect((await call(again.url, 'GET', '/health')).status).toBe(200);
    // appends go on after the break: the new start is in the log
    const log = await call(again.url, 'GET', '/v1/audit?limit=100', { agent: OP });
    expect(log.body.entries.filter((e: Json) => e.action === 'start')).toHaveLength(2);
  } finally {
    await again.stop();
    await first.stop();
  }
});
