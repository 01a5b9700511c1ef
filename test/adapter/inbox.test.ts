/**
 * The inbox: long polls woken by the commit that enqueues for them, empty answers after the
 * wait, hand-out order, and isolation between agents.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { call, type Json, startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
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

describe('GET /v1/inbox', () => {
  it('a waiting poll answers as soon as the commit that enqueues for it returns', async () => {
    t = await startTestAdapter();
    const url = t.url;
    const started = Date.now();
    const poll = inbox(url, 'qa', '?wait=20');
    await new Promise((r) => setTimeout(r, 100)); // the poll is parked by now
    const sent = await send(url, 'pm', '@qa', { payload: { n: 1 } });
    const got = await poll;
    expect(Date.now() - started).toBeLessThan(10_000); // woken, not timed out at 20 s
    expect(got.status).toBe(200);
    expect(got.body.deliveries).toHaveLength(1);
    const d = got.body.deliveries[0];
    expect(d).toMatchObject({
      attempt: 1,
      message: { message_id: sent.body.message_id, payload: { n: 1 } },
    });
    expect(typeof d.delivery_id).toBe('number');
    expect(Date.parse(d.lease_expires_at)).toBeGreaterThan(Date.now());
  });

  it('an empty wait answers 200 with no deliveries after the wait', async () => {
    t = await startTestAdapter();
    const started = Date.now();
    const got = await inbox(t.url, 'qa', '?wait=1');
    expect(got.status).toBe(200);
    expect(got.body).toEqual({ deliveries: [] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
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

  it('50 concurrent pollers each get only their own deliveries', async () => {
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
    const polls = ids.map((id) => inbox(url, id, '?wait=20&max=5'));
    await new Promise((r) => setTimeout(r, 200));
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
  it('acks take a delivery out of the queue; another agent cannot ack it', async () => {
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
    expect(foreign.status).toBe(403);
    expect(foreign.body.error).toBe('not_your_delivery');
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
