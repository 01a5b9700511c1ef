/**
 * The inbox: long polls woken by the commit that enqueues for them, empty answers after the
 * wait, hand-out order, and isolation between agents.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { sha256Hex, tokenOf, topologyObject } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (url: string, agent: string, to: string, extra: Record<string, unknown> = {}) =>
  call(url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind: 'status', payload: {}, ...extra },
  });
const inbox = (url: string, agent: string, query = '') =>
  call(url, 'GET', `/v1/inbox${query}`, { agent });

/** Group commits so far, from /metrics. Every lease is one, also a lease that finds nothing. */
async function commits(url: string): Promise<number> {
  const text = String((await call(url, 'GET', '/metrics')).body);
  const count = /^agw_commit_messages_count (\d+)$/m.exec(text);
  if (count === null) throw new Error(`no agw_commit_messages_count in /metrics:\n${text}`);
  return Number(count[1]);
}

/**
 * Starts a long poll on a quiet adapter and returns once it is parked: its first look (a
 * lease, one group commit) has committed and found nothing, and a poll parks in the same turn
 * of the event loop as that commit. The answer is wrapped so that it is not awaited here.
 */
async function parkedPoll(url: string, agent: string, query: string) {
  const before = await commits(url);
  const answer = inbox(url, agent, query);
  const deadline = Date.now() + 10_000; // generous: it only bounds a failing test
  while ((await commits(url)) === before) {
    if (Date.now() > deadline) throw new Error(`${agent}'s poll did not look within 10 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return { answer };
}

describe('GET /v1/inbox', () => {
  it('a waiting poll answers as soon as the commit that enqueues for it returns', {
    timeout: 60_000,
  }, async () => {
    t = await startTestAdapter();
    const url = t.url;
    const poll = await parkedPoll(url, 'qa', '?wait=20');
    const sent = await send(url, 'pm', '@qa', { payload: { n: 1 } });
    const got = await poll.answer;
    // woken by the commit: a parked poll whose wait runs out answers with no deliveries
    expect(got.status).toBe(200);
    expect(got.body.deliveries).toHaveLength(1);
    const d = got.body.deliveries[0];
    expect(d).toMatchObject({
      attempt: 1,
      message: { message_id: sent.body.message_id, payload: { n: 1 } },
    });
    expect(typeof d.delivery_id).toBe('number');
    // leased for leaseMs (30 s) from the hand-out, which came after the message was received
    expect(Date.parse(d.lease_expires_at)).toBeGreaterThanOrEqual(
      Date.parse(d.message.timestamp_iso8601) + 30_000,
    );
  });

  it('an empty wait answers 200 with no deliveries when the wait runs out', async () => {
    t = await startTestAdapter();
    const got = await inbox(t.url, 'qa', '?wait=1');
    expect(got.status).toBe(200);
    expect(got.body).toEqual({ deliveries: [] });
    // the poll that ran out took nothing with it: the next message goes to the next poll
    const sent = await send(t.url, 'pm', '@qa');
    expect((await inbox(t.url, 'qa')).body.deliveries).toMatchObject([
      { attempt: 1, message: { message_id: sent.body.message_id } },
    ]);
  });

  it('hands out critical channels first, sequence order inside each channel', async () => {
    t = await startTestAdapter();
    await send(t.url, 'pm', 'product', { payload: { i: 'p1' } });
    await send(t.url, 'pm', '@qa', { payload: { i: 'd1' } });
    await send(t.url, 'pm', 'product', { payload: { i: 'p2' }, priority: 'critical' });
    await send(t.url, 'orchestrator', 'all-agents', { payload: { i: 'a1' }, priority: 'critical' });
    await send(t.url, 'pm', '@qa', { payload: { i: 'd2' } });
    const got = await inbox(t.url, 'qa', '?max=10');
    expect(got.body.deliveries.map((d: Json) => d.message.payload.i)).toEqual([
      'p1',
      'p2',
      'a1',
      'd1',
      'd2',
    ]);
    // leased now: the next poll has nothing
    expect((await inbox(t.url, 'qa')).body.deliveries).toEqual([]);
  });

  it('50 concurrent pollers each get only their own deliveries', { timeout: 60_000 }, async () => {
    const base = topologyObject();
    const ids = Array.from({ length: 50 }, (_, i) => `agent${i}`);
    const topology = {
      ...base,
      agents: [
        ...base.agents,
        ...ids.map((id) => ({ id, role: 'x', token_sha256: sha256Hex(tokenOf(id)) })),
      ],
    };
    t = await startTestAdapter({}, { topology });
    const url = t.url;
    // all fifty parked before anything is sent, so that every answer comes from a wake-up
    const polls: Promise<Awaited<ReturnType<typeof inbox>>>[] = [];
    for (const id of ids) polls.push((await parkedPoll(url, id, '?wait=20&max=5')).answer);
    await Promise.all(ids.map((id) => send(url, 'pm', `@${id}`, { payload: { for: id } })));
    const answers = await Promise.all(polls);
    answers.forEach((a, i) => {
      expect(a.body.deliveries.length).toBeGreaterThanOrEqual(1);
      for (const d of a.body.deliveries) expect(d.message.payload.for).toBe(ids[i]);
    });
  });

  it('refuses a wait over 30 s or a bad max, naming the field', async () => {
    t = await startTestAdapter();
    expect((await inbox(t.url, 'qa', '?wait=31')).body).toMatchObject({
      error: 'invalid_request',
      field: 'wait',
    });
    expect((await inbox(t.url, 'qa', '?max=0')).body).toMatchObject({
      error: 'invalid_request',
      field: 'max',
    });
  });
});

describe('acks, nacks and heartbeat', () => {
  it("acks take a delivery out of the queue; another agent's ack of it is as of an unknown id", async () => {
    t = await startTestAdapter();
    await send(t.url, 'pm', '@qa');
    await send(t.url, 'pm', '@qa', { priority: 'critical' });
    expect((await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body).toEqual({
      pending: 2,
      critical_pending: 1,
    });
    const ids = (await inbox(t.url, 'qa')).body.deliveries.map((d: Json) => d.delivery_id);
    const foreign = await call(t.url, 'POST', '/v1/acks', {
      agent: 'pm',
      body: { delivery_ids: ids },
    });
    expect(foreign.status).toBe(200);
    expect(foreign.body).toEqual({ acked: [], dead_lettered: [], unknown: ids });
    // nothing of qa's changed: both still pending for qa
    expect((await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body).toEqual({
      pending: 2,
      critical_pending: 1,
    });
    const ack = await call(t.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [...ids, 999] },
    });
    expect(ack.body).toEqual({ acked: ids, dead_lettered: [], unknown: [999] });
    expect((await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body).toEqual({
      pending: 0,
      critical_pending: 0,
    });
    const agents = await call(t.url, 'GET', '/v1/agents', { agent: 'orchestrator' });
    const qa = agents.body.agents.find((a: Json) => a.id === 'qa');
    expect(qa).toMatchObject({ queue_depth: 0, role: 'qa' });
    expect(Date.parse(qa.last_seen)).toBeGreaterThan(0);
    expect((await call(t.url, 'GET', '/v1/agents', { agent: 'qa' })).body.error).toBe(
      'not_alerts_agent',
    );
  });

  it('a bad ack body is a 400 naming delivery_ids', async () => {
    t = await startTestAdapter();
    const res = await call(t.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: ['x'] },
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'invalid_request', field: 'delivery_ids' });
  });
});
