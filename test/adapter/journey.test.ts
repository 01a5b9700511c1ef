/**
 * GET /v1/messages/{message_id}/journey at a real adapter over loopback (SQLite): who may see
 * what, and each cause set up for real: a recipient that never polls, a lease held, a lease left
 * to expire, a nack with retry false, a full queue that evicts, and an ack.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function adapterWith(overrides: Record<string, string> = {}): Promise<TestAdapter> {
  const adapter = await startTestAdapter(overrides);
  stops.push(adapter.stop);
  return adapter;
}

const send = async (a: TestAdapter, to: string, kind = 'status', agent = 'pm') =>
  (
    await call(a.url, 'POST', '/v1/messages', {
      agent,
      body: { to, kind, payload: {}, idempotency_key: randomUUID() },
    })
  ).body.message_id as string;

const journey = (a: TestAdapter, id: string, agent = 'pm') =>
  call(a.url, 'GET', `/v1/messages/${id}/journey`, { agent });

const copyOf = (body: Json, agent: string) =>
  (body.recipients as Json[]).find((r) => r.agent === agent);

it('shows the sender and alerts_to every recipient, a recipient its own copy, and no one else', async () => {
  const a = await adapterWith();
  const id = await send(a, 'product'); // pm to engineering, qa, growth, research (not pm)
  const all = await journey(a, id);
  expect(all.status, JSON.stringify(all.body)).toBe(200);
  expect(all.body.message).toMatchObject({ message_id: id, sender: 'pm', channel: 'product' });
  const agents = (all.body.recipients as Json[]).map((r) => r.agent).sort();
  expect(agents.length).toBeGreaterThan(1);
  expect((await journey(a, id, 'orchestrator')).body.recipients).toHaveLength(agents.length);
  const own = await journey(a, id, agents[0]);
  expect(own.status).toBe(200);
  expect((own.body.recipients as Json[]).map((r) => r.agent)).toEqual([agents[0]]);
  const direct = await send(a, '@qa');
  const other = await journey(a, direct, 'engineering');
  expect([other.status, other.body.error]).toEqual([403, 'not_your_message']);
  // by the idempotency key of the caller's own send; another agent's key names nothing for it
  const key = randomUUID();
  const sent = await call(a.url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: { to: '@qa', kind: 'status', payload: {}, idempotency_key: key },
  });
  const byKey = await journey(a, key);
  expect(byKey.body.message.message_id).toBe(sent.body.message_id);
  expect((await journey(a, key, 'qa')).status).toBe(404);
  const unknown = await journey(a, '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11');
  expect([unknown.status, unknown.body.error]).toEqual([404, 'not_found']);
});

it('tells a recipient that never polled, a lease held, and an ack, with the timeline', async () => {
  const a = await adapterWith();
  const id = await send(a, '@qa');
  let qa = copyOf((await journey(a, id)).body, 'qa');
  expect(qa).toMatchObject({ cause: 'waiting_for_poll', last_poll: null, state: 'pending' });
  expect(qa.explanation).toBe('Ready: qa has never polled; 1 message waits for it.');
  const [d] = (await call(a.url, 'GET', '/v1/inbox', { agent: 'qa' })).body.deliveries;
  qa = copyOf((await journey(a, id)).body, 'qa');
  expect(qa).toMatchObject({ cause: 'leased', state: 'leased', attempts: 1 });
  expect(qa.explanation).toMatch(/^Leased to qa since \d\d:\d\d:\d\d \(.*\), attempt 1 of 4;/);
  expect(Date.parse(qa.last_poll)).toBeGreaterThan(0);
  await call(a.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [d.delivery_id] } });
  qa = copyOf((await journey(a, id, 'qa')).body, 'qa');
  expect(qa.cause).toBe('acked');
  expect(qa.events.map((e: Json) => e.event)).toEqual(['queued', 'leased', 'acked']);
});

it('tells a lease left to expire as a retry, and a rejection as a dead letter with its note', async () => {
  const a = await adapterWith({ leaseMs: '100', retryBaseMs: '600000' });
  const id = await send(a, '@qa');
  await call(a.url, 'GET', '/v1/inbox', { agent: 'qa' }); // leased, never acked
  const expiredOf = async () => copyOf((await journey(a, id)).body, 'qa');
  await until(
    async () => (await expiredOf()).events.some((e: Json) => e.event === 'lease_expired'),
    "the sweep to expire qa's lease",
  );
  const expired = await expiredOf();
  expect(expired).toMatchObject({ cause: 'retry_backoff', state: 'pending', attempts: 1 });
  expect(expired.explanation).toMatch(/^The lease of attempt 1 expired; attempt 2 of 4 is due at/);

  const other = await send(a, '@engineering');
  const [d] = (await call(a.url, 'GET', '/v1/inbox', { agent: 'engineering' })).body.deliveries;
  await call(a.url, 'POST', '/v1/nacks', {
    agent: 'engineering',
    body: { delivery_ids: [d.delivery_id], retry: false, reason: 'not for engineering' },
  });
  const rejected = copyOf((await journey(a, other)).body, 'engineering');
  expect(rejected).toMatchObject({
    cause: 'dead_letter',
    state: 'dead_letter',
    reason: 'rejected',
    note: 'not for engineering',
  });
  expect(rejected.explanation).toContain('engineering rejected it ("not for engineering")');
  expect(rejected.events.at(-1)).toMatchObject({
    event: 'dead_lettered',
    detail: { reason: 'rejected', note: 'not for engineering' },
  });
});

it('tells a copy a full queue evicted', async () => {
  const a = await adapterWith({ queueCapacity: '2' });
  const first = await send(a, '@research');
  await send(a, '@research');
  await send(a, '@research'); // the queue holds 2: the oldest normal copy goes
  const research = copyOf((await journey(a, first)).body, 'research');
  expect(research).toMatchObject({ cause: 'dead_letter', reason: 'evicted' });
  expect(research.explanation).toContain("research's full queue dropped it");
  expect(research.events.map((e: Json) => e.event)).toEqual(['queued', 'evicted']);
});
