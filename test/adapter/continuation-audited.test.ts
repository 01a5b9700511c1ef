/**
 * The alerts_to agent's continuation is in the audit log (CONTRACT.md, "Audit log"): its message
 * in a thread (which starts the thread's budget again) is an entry with `actor` its agent id,
 * `action` `continuation`, `target` the message; its messages that start a thread, other
 * agents' replies and a repeat of a stored key are not. The chain still verifies. A real adapter
 * on port 0 with a SQLite file in a temp folder.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/store/rules/audit-chain.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

async function post(url: string, agent: string, body: Json, status = 201): Promise<Json> {
  const r = await call(url, 'POST', '/v1/messages', { agent, body });
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  return r.body;
}

const message = (to: string, replyTo?: string): Json => ({
  idempotency_key: randomUUID(),
  to,
  kind: 'note/text',
  payload: { text: 'go on' },
  ...(replyTo === undefined ? {} : { reply_to: replyTo }),
});

it("records the alerts_to agent's continuation, and nothing for what is none", async () => {
  t = await startTestAdapter();
  const { url } = t;
  const root = await post(url, 'pm', message('@orchestrator'));
  const reply = message('@pm', root.message_id);
  const continuation = await post(url, 'orchestrator', reply);
  expect(continuation).toMatchObject({ thread_id: root.thread_id, hop: 0 });
  // none: a thread it starts, another agent's reply, a repeat of the stored key
  await post(url, 'orchestrator', message('@qa'));
  await post(url, 'pm', message('@orchestrator', continuation.message_id));
  expect((await post(url, 'orchestrator', reply, 200)).duplicate).toBe(true);

  const audit = await call(url, 'GET', '/v1/audit?limit=1000', { agent: 'operator:alice' });
  expect(audit.status).toBe(200);
  const entries = (audit.body.entries as Json[]).filter((e) => e.action === 'continuation');
  expect(entries).toEqual([
    expect.objectContaining({
      actor: 'orchestrator',
      action: 'continuation',
      target: continuation.message_id,
      detail: { channel: '@pm', thread_id: root.thread_id },
    }),
  ]);
  const report = await verifyAuditChain((after, limit) => t!.store.audit(after, limit));
  expect(report.broken).toBeUndefined();
  expect(report.entries).toBe((audit.body.entries as Json[]).length);
});
