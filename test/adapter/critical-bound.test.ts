/**
 * A bound on critical (docs/design/threads.md, "A bound on critical"): critical deliveries are
 * never evicted, so a recipient holds at most AGW_CRITICAL_CAPACITY of them; past it a new critical
 * copy is dead-lettered `queue_full` and the `alerts_to` agent is told, while the message itself is
 * stored and its other recipients get it.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = async (to: string, kind: string, payload: object = {}, agent = 'pm') => {
  const r = await call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind, payload },
  });
  expect(r.status).toBe(201); // the message is stored: only a recipient's copy is refused
  return r.body.message_id as string;
};

it('dead-letters a critical copy past AGW_CRITICAL_CAPACITY as queue_full with an alert, while normal copies still go in', async () => {
  t = await startTestAdapter({ criticalCapacity: '2', queueCapacity: '10' });
  // two senders, each within its share (2 ÷ 6 agents: 1), fill the capacity; a third is over it
  const held = [
    await send('@qa', 'escalation'),
    await send('@qa', 'escalation', {}, 'engineering'),
  ];
  const over = await send('@qa', 'escalation', { n: 3 }, 'research');
  await send('@qa', 'status');

  const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
  expect(hb.body).toEqual({ pending: 3, critical_pending: 2 });
  const status = await call(t.url, 'GET', `/v1/messages/${over}`, { agent: 'research' });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'dead_letter', reason: 'queue_full' }),
  ]);
  const dead = await call(t.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' });
  expect(
    (dead.body.dead_letters as Json[]).map((d) => [d.reason, d.recipient, d.message.message_id]),
  ).toEqual([['queue_full', 'qa', over]]);

  const inbox = await call(t.url, 'GET', '/v1/inbox?max=10', { agent: 'orchestrator' });
  const alerts = (inbox.body.deliveries as Json[]).map((d) => d.message);
  expect(alerts).toEqual([
    expect.objectContaining({
      sender: 'adapter',
      kind: 'alert/dead-letter',
      priority: 'critical',
      payload: expect.objectContaining({
        reason: 'queue_full',
        recipient: 'qa',
        message_ids: [over],
      }),
    }),
  ]);
  // qa gets the two it holds, then the normal one
  const got = await call(t.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' });
  expect((got.body.deliveries as Json[]).map((d) => d.message.message_id).slice(0, 2)).toEqual(
    held,
  );
});
