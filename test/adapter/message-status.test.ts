/**
 * GET /v1/messages/{message_id}: the sender's "was my assignment received?". The message and
 * each recipient's delivery state as it moves (pending, leased, acked, dead_letter with its
 * reason and the agent's note), for the sender and the alerts_to agent only.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (agent: string, to: string) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: {
      idempotency_key: randomUUID(),
      to,
      kind: 'task/request',
      payload: { task_id: 'T-7', description: 'review the release notes' },
    },
  }).then((r) => {
    expect(r.status).toBe(201);
    return r.body as Json;
  });
const status = (messageId: string, agent = 'pm') =>
  call(t!.url, 'GET', `/v1/messages/${messageId}`, { agent });
const states = async (messageId: string) => {
  const r = await status(messageId);
  expect(r.status).toBe(200);
  return Object.fromEntries(
    (r.body.recipients as Json[]).map(({ agent, ...rest }) => [agent, rest]),
  );
};
const take = async (agent: string) => {
  const got = (await call(t!.url, 'GET', '/v1/inbox?max=1', { agent })).body.deliveries as Json[];
  expect(got).toHaveLength(1);
  return got[0].delivery_id as number;
};
const ack = (agent: string, id: number) =>
  call(t!.url, 'POST', '/v1/acks', { agent, body: { delivery_ids: [id] } });
const nack = (agent: string, body: object) => call(t!.url, 'POST', '/v1/nacks', { agent, body });

describe('GET /v1/messages/{message_id}', () => {
  it("the sender sees the message and each recipient's state as it moves", async () => {
    // no retries: a plain nack is the last attempt
    t = await startTestAdapter({ maxRetries: '0' });
    const sent = await send('pm', 'product');
    const first = await status(sent.message_id);
    expect(first.status).toBe(200);
    expect(first.body.message).toMatchObject({
      message_id: sent.message_id,
      channel: 'product',
      channel_sequence_id: sent.channel_sequence_id,
      sender: 'pm',
      kind: 'task/request',
      priority: 'normal',
      payload: { task_id: 'T-7', description: 'review the release notes' },
    });
    // every member but the sender, each pending, not yet handed out
    expect(first.body.recipients).toEqual(
      ['engineering', 'qa', 'research', 'growth'].map((agent) => ({
        agent,
        state: 'pending',
        attempts: 0,
        reason: null,
      })),
    );

    const e = await take('engineering');
    expect((await states(sent.message_id)).engineering).toEqual({
      state: 'leased',
      attempts: 1,
      reason: null,
    });
    await ack('engineering', e);
    const q = await take('qa');
    await nack('qa', { delivery_ids: [q], retry: false, reason: 'T-7 is not a QA task' });
    const r = await take('research');
    await nack('research', { delivery_ids: [r] }); // its last attempt

    expect(await states(sent.message_id)).toEqual({
      engineering: { state: 'acked', attempts: 1, reason: null },
      qa: { state: 'dead_letter', attempts: 1, reason: 'rejected', note: 'T-7 is not a QA task' },
      research: { state: 'dead_letter', attempts: 1, reason: 'nacked' },
      growth: { state: 'pending', attempts: 0, reason: null },
    });
  });

  it('a replayed dead letter shows the fresh delivery', async () => {
    t = await startTestAdapter();
    const sent = await send('pm', '@qa');
    const q = await take('qa');
    await nack('qa', { delivery_ids: [q], retry: false, reason: 'not now' });
    expect((await states(sent.message_id)).qa.state).toBe('dead_letter');
    const dead = (await call(t.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' })).body
      .dead_letters as Json[];
    const replay = await call(t.url, 'POST', `/v1/dead-letters/${dead[0].id}/replay`, {
      agent: 'orchestrator',
    });
    expect(replay.status).toBe(201);
    expect(await states(sent.message_id)).toEqual({
      qa: { state: 'pending', attempts: 0, reason: null },
    });
  });

  it('the alerts_to agent may read it too, and sees the same', async () => {
    t = await startTestAdapter();
    const sent = await send('pm', 'product');
    await take('qa');
    const bySender = await status(sent.message_id, 'pm');
    const byOrchestrator = await status(sent.message_id, 'orchestrator');
    expect(byOrchestrator.status).toBe(200);
    expect(byOrchestrator.body).toEqual(bySender.body);
    expect(byOrchestrator.body.recipients).toContainEqual({
      agent: 'qa',
      state: 'leased',
      attempts: 1,
      reason: null,
    });
  });

  it('any other agent, a recipient too, gets 403 not_your_message', async () => {
    t = await startTestAdapter();
    const sent = await send('pm', 'product');
    for (const agent of ['qa', 'growth', 'engineering']) {
      const r = await status(sent.message_id, agent);
      expect(r.status).toBe(403);
      expect(r.body.error).toBe('not_your_message');
    }
  });

  it('an unknown message id is 404 unknown_message; no token is 401', async () => {
    t = await startTestAdapter();
    const unknown = await status(randomUUID());
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe('unknown_message');
    const sent = await send('pm', '@qa');
    const anonymous = await call(t.url, 'GET', `/v1/messages/${sent.message_id}`);
    expect(anonymous.status).toBe(401);
  });
});
