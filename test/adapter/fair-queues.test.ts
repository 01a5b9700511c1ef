/**
 * Fairness between agents (docs/design/delivery.md, "Bounded queues"; floods that once crowded
 * other agents out, reproduced through a real adapter on a real SQLite file, at the default rate on
 * a clock the test moves):
 * - a flood within the sender's rate evicts its own oldest copies from a full queue, never
 *   another member's task/request;
 * - one agent's escalations past its share of a recipient's critical capacity are dead-lettered,
 *   never another agent's escalation or the adapter's own alert;
 * - one agent's budget refusals in many threads make one alert/budget a window
 *   (docs/design/threads.md, "Budgets").
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const envelope = (to: string, kind: string, payload: Json = {}) => ({
  idempotency_key: randomUUID(),
  to,
  kind,
  payload,
});

/** One batch of `agent`'s; the results. */
const batch = async (agent: string, messages: unknown[]): Promise<Json[]> => {
  const r = await call(t!.url, 'POST', '/v1/messages/batch', { agent, body: { messages } });
  expect(r.status).toBe(200);
  return r.body.results as Json[];
};

const stateOf = async (sender: string, messageId: string, recipient: string) => {
  const r = await call(t!.url, 'GET', `/v1/messages/${messageId}`, { agent: sender });
  expect(r.status).toBe(200);
  return (r.body.recipients as Json[]).find((x) => x.agent === recipient);
};

it('a member flooding product with 600 status within its rate evicts its own, never pm’s task/request to qa', {
  timeout: 60_000,
}, async () => {
  let clock = Date.UTC(2031, 0, 1);
  // the defaults: queue 500, 100 a second with a burst of 500
  t = await startTestAdapter(
    { queueCapacity: '500', sendRate: '100', sendBurst: '500' },
    { now: () => clock },
  );
  const tasks = await batch(
    'pm',
    Array.from({ length: 10 }, (_, i) =>
      envelope('product', 'task/request', { task_id: `T${i}`, description: 'do it' }),
    ),
  );
  expect(tasks.map((r) => r.status)).toEqual(Array(10).fill(201));
  // engineering: 600 status, as a sidecar sends them: 100 a batch, waiting out each 429
  let sent = 0;
  while (sent < 600) {
    const results = await batch(
      'engineering',
      Array.from({ length: Math.min(100, 600 - sent) }, (_, i) =>
        envelope('product', 'status', { n: sent + i }),
      ),
    );
    const stored = results.filter((r) => r.status === 201).length;
    sent += stored;
    if (stored < results.length) {
      expect(results[stored]!.status).toBe(429);
      clock += 1000 * Number(results[stored]!.retry_after_s);
    }
  }
  // qa's queue is full: 500, of which pm's 10 requests, every one still pending
  const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
  expect(hb.body).toEqual({ pending: 500, critical_pending: 0 });
  for (const task of tasks) {
    expect(await stateOf('pm', task.message_id as string, 'qa')).toMatchObject({
      state: 'pending',
      reason: null,
    });
  }
  // what was evicted is engineering's own, the oldest first
  const dead = await call(t.url, 'GET', '/v1/dead-letters?limit=1000', { agent: 'orchestrator' });
  const evicted = (dead.body.dead_letters as Json[]).filter((d) => d.recipient === 'qa');
  expect(evicted).toHaveLength(110);
  expect(new Set(evicted.map((d) => [d.reason, d.message.sender].join(' ')))).toEqual(
    new Set(['evicted engineering']),
  );
  expect(evicted.map((d) => d.message.payload.n)).toEqual(Array.from({ length: 110 }, (_, i) => i));
  // qa is handed pm's first request first (its channel's order holds)
  const [first] = await pollAs(t.url, 'qa', { max: 1 });
  expect(first.message.message_id).toBe(tasks[0]!.message_id);
});

it("one agent's 25 escalations to the orchestrator at AGW_CRITICAL_CAPACITY=20 dead-letter its own, never qa's escalation or the adapter's alert", async () => {
  t = await startTestAdapter({ criticalCapacity: '20' });
  const flood = await batch(
    'pm',
    Array.from({ length: 25 }, (_, i) => envelope('@orchestrator', 'escalation', { n: i })),
  );
  expect(flood.map((r) => r.status)).toEqual(Array(25).fill(201));
  const qa = await call(t.url, 'POST', '/v1/messages', {
    agent: 'qa',
    body: envelope('@orchestrator', 'escalation', { why: 'real' }),
  });
  expect(qa.status).toBe(201);

  // pm's share of 20 among the 6 agents is 3: its 4th to 25th are its own dead letters
  for (const [i, r] of flood.entries()) {
    expect(await stateOf('pm', r.message_id as string, 'orchestrator')).toMatchObject(
      i < 3 ? { state: 'pending' } : { state: 'dead_letter', reason: 'queue_full' },
    );
  }
  expect(await stateOf('qa', qa.body.message_id as string, 'orchestrator')).toMatchObject({
    state: 'pending',
  });
  const got = await pollAs(t.url, 'orchestrator', { max: 100 });
  const messages = got.map((d) => d.message);
  expect(messages.filter((m) => m.sender === 'pm')).toHaveLength(3);
  expect(messages.filter((m) => m.sender === 'qa').map((m) => m.message_id)).toEqual([
    qa.body.message_id,
  ]);
  expect(messages.filter((m) => m.sender === 'adapter')).toEqual([
    expect.objectContaining({
      kind: 'alert/dead-letter',
      priority: 'critical',
      payload: expect.objectContaining({
        reason: 'queue_full',
        recipient: 'orchestrator',
        message_ids: [flood[3]!.message_id],
      }),
    }),
  ]);
});

it('refused replies in 60 threads make one alert/budget for their sender, not 60', async () => {
  let clock = Date.UTC(2031, 0, 1);
  t = await startTestAdapter({ hopBudget: '1' }, { now: () => clock });
  const roots = await batch(
    'pm',
    Array.from({ length: 60 }, (_, i) => envelope('@qa', 'status', { n: i })),
  );
  const replies = await batch(
    'qa',
    roots.map((r) => ({ ...envelope('@pm', 'status'), reply_to: r.message_id })),
  );
  expect(replies.map((r) => r.status)).toEqual(Array(60).fill(201));
  const refused = await batch(
    'pm',
    replies.map((r) => ({ ...envelope('@qa', 'status'), reply_to: r.message_id })),
  );
  expect(refused.map((r) => r.error)).toEqual(Array(60).fill('hop_budget_exceeded'));
  const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'orchestrator' });
  expect(hb.body).toEqual({ pending: 1, critical_pending: 1 });
  const [alert] = await pollAs(t.url, 'orchestrator', { max: 10 });
  expect(alert.message).toMatchObject({
    sender: 'adapter',
    kind: 'alert/budget',
    payload: { reason: 'hop_budget_exceeded', sender: 'pm', count: 1 },
  });
  // the window's end, 30 s on (the store's sweep, as the adapter's timer runs it): one more,
  // with the other 59 refusals counted
  const ack = await call(t.url, 'POST', '/v1/acks', {
    agent: 'orchestrator',
    body: { delivery_ids: [alert.delivery_id] },
  });
  expect(ack.status).toBe(200);
  clock += 30_000;
  await t.store.commit([{ op: 'sweep', now: clock }]);
  const [next] = await pollAs(t.url, 'orchestrator', { max: 10 });
  expect(next.message).toMatchObject({
    kind: 'alert/budget',
    payload: { reason: 'hop_budget_exceeded', sender: 'pm', count: 59 },
  });
  expect(next.message.payload.message_ids).toHaveLength(20);
});
