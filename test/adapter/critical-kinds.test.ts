/**
 * Kinds critical by default (docs/reference/adapter-api.md, "POST /v1/messages"): an `escalation`
 * or a `policy/update` sent without `priority` is stored as critical, so a flood of normal messages
 * to a full queue evicts normal deliveries, never it. A `priority` the sender gives wins.
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

const send = (agent: string, to: string, kind: string, extra: object = {}) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind, payload: {}, ...extra },
  }).then((r) => {
    expect(r.status).toBe(201);
    return r.body.message_id as string;
  });
const replay = (channel: string, agent: string) =>
  call(t!.url, 'GET', `/v1/channels/${encodeURIComponent(channel)}/messages`, { agent }).then(
    (r) => r.body.messages as Json[],
  );
const deadLetters = () =>
  call(t!.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' }).then(
    (r) => r.body.dead_letters as Json[],
  );

describe('critical kinds', () => {
  it('an escalation and a policy/update without priority are stored critical and survive a flood that evicts normal ones', async () => {
    t = await startTestAdapter({ queueCapacity: '3' });
    const escalation = await send('pm', '@qa', 'escalation');
    const policy = await send('orchestrator', '@qa', 'policy/update');
    const flood: string[] = [];
    for (let i = 0; i < 10; i++) flood.push(await send('pm', '@qa', 'status', { payload: { i } }));

    // the replay shows the priority as resolved
    const stored = await replay('@qa', 'qa');
    expect(stored.map((m) => [m.kind, m.priority])).toEqual([
      ['escalation', 'critical'],
      ['policy/update', 'critical'],
      ...flood.map(() => ['status', 'normal']),
    ]);

    // the bound of 3 held by evicting the oldest normal ones; the two critical ones stayed
    const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
    expect(hb.body).toEqual({ pending: 3, critical_pending: 2 });
    const dead = await deadLetters();
    expect(dead.map((d) => [d.reason, d.message.message_id])).toEqual(
      flood.slice(0, 9).map((id) => ['evicted', id]),
    );

    // and they are delivered, in sequence order, with the newest normal one
    const got = (await call(t.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(got.map((d) => [d.message.message_id, d.message.priority])).toEqual([
      [escalation, 'critical'],
      [policy, 'critical'],
      [flood[9], 'normal'],
    ]);
  });

  it('a critical kind in a group channel goes ahead of earlier normal channels', async () => {
    t = await startTestAdapter();
    const direct = await send('pm', '@qa', 'status');
    const policy = await send('orchestrator', 'all-agents', 'policy/update');
    const got = (await call(t.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(got.map((d) => d.message.message_id)).toEqual([policy, direct]);
    expect(got[0].message.priority).toBe('critical');
  });

  it('an escalation sent with "priority": "normal" stays normal, and can be evicted', async () => {
    t = await startTestAdapter({ queueCapacity: '3' });
    const escalation = await send('pm', '@qa', 'escalation', { priority: 'normal' });
    for (let i = 0; i < 3; i++) await send('pm', '@qa', 'status', { payload: { i } });
    const [first] = await replay('@qa', 'qa');
    expect([first.message_id, first.priority]).toEqual([escalation, 'normal']);
    const dead = await deadLetters();
    expect(dead.map((d) => [d.reason, d.message.kind, d.message.message_id])).toEqual([
      ['evicted', 'escalation', escalation],
    ]);
  });

  it('other kinds without priority are normal; "priority": "critical" makes any kind critical', async () => {
    t = await startTestAdapter();
    await send('pm', '@qa', 'task/update', { payload: { task_id: 'T-1' } });
    await send('pm', '@qa', 'signal', { priority: 'critical' });
    await send('pm', '@qa', 'status');
    const stored = await replay('@qa', 'qa');
    expect(stored.map((m) => [m.kind, m.priority])).toEqual([
      ['task/update', 'normal'],
      ['signal', 'critical'],
      ['status', 'normal'],
    ]);
  });
});
