/**
 * Leases, retries and dead letters over HTTP, with short leases (100 ms) and a 5 ms backoff
 * base; and bounded queues with priority-aware eviction. No test sleeps for a lease to run
 * out: it waits for what follows, a redelivery or an alert on a long poll, or the delivery's
 * row turning pending again.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { until } from '../helpers/wait.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (agent: string, to: string, extra: Record<string, unknown> = {}) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind: 'status', payload: {}, ...extra },
  });
/** A long poll: it answers as soon as there is a delivery; `wait` only bounds a failing test. */
const poll = (agent: string, wait = 10, max = 10) =>
  call(t!.url, 'GET', `/v1/inbox?wait=${wait}&max=${max}`, { agent }).then(
    (r) => r.body.deliveries as Json[],
  );
const ack = (agent: string, ids: number[]) =>
  call(t!.url, 'POST', '/v1/acks', { agent, body: { delivery_ids: ids } });
const deadLetters = () =>
  call(t!.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' }).then(
    (r) => r.body.dead_letters as Json[],
  );

/** A delivery's row as the adapter stored it (state: 0 pending, 1 leased, 2 acked, 3 dead). */
function deliveryRow(id: number): { state: number; attempt: number } {
  const db = new Database(t!.db, { readonly: true });
  try {
    return db.prepare('SELECT state, attempt FROM deliveries WHERE id = ?').get(id) as {
      state: number;
      attempt: number;
    };
  } finally {
    db.close();
  }
}

describe('retries', { timeout: 60_000 }, () => {
  it('hands out an unacked message exactly 1 + 3 times, then dead-letters it and alerts', async () => {
    t = await startTestAdapter({ leaseMs: '100', retryBaseMs: '5', maxRetries: '3' });
    const sent = await send('pm', '@qa');
    const attempts: number[] = [];
    for (let i = 0; i < 4; i++) {
      const got = await poll('qa');
      expect(got).toHaveLength(1);
      expect(got[0].message.message_id).toBe(sent.body.message_id);
      attempts.push(got[0].attempt);
    }
    expect(attempts).toEqual([1, 2, 3, 4]);
    // the fourth lease expires: a dead letter instead of a fifth hand-out, and with it an alert,
    // which orchestrator's long poll answers with as soon as it is committed
    const alerts = await poll('orchestrator');
    expect(await poll('qa', 0)).toEqual([]);
    const dead = await deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({
      reason: 'lease_expired',
      attempts: 4,
      recipient: 'qa',
      message: { message_id: sent.body.message_id },
    });
    expect(alerts).toHaveLength(1);
    expect(alerts[0].message).toMatchObject({
      sender: 'adapter',
      channel: '@orchestrator',
      kind: 'alert/dead-letter',
      priority: 'critical',
      payload: {
        reason: 'lease_expired',
        recipient: 'qa',
        count: 1,
        message_ids: [sent.body.message_id],
        attempts: 4,
      },
    });
  });

  it('a nack is a failed attempt; an ack after the lease expired is still taken', async () => {
    t = await startTestAdapter({ leaseMs: '100', retryBaseMs: '5', maxRetries: '3' });
    await send('pm', '@qa');
    const [first] = await poll('qa');
    const nack = await call(t.url, 'POST', '/v1/nacks', {
      agent: 'qa',
      body: { delivery_ids: [first.delivery_id] },
    });
    expect(nack.body).toEqual({ nacked: [first.delivery_id], ignored: [], unknown: [] });
    const [second] = await poll('qa');
    expect(second).toMatchObject({ delivery_id: first.delivery_id, attempt: 2 });
    // the lease runs out: the delivery is pending again, waiting for its retry ...
    await until(() => {
      const row = deliveryRow(second.delivery_id);
      return row.state === 0 && row.attempt === 2;
    }, 'the second lease to run out');
    expect((await ack('qa', [second.delivery_id])).body.acked).toEqual([second.delivery_id]); // ... but the work was done
    // nothing comes after the ack: a second's wait, which spans many retry backoffs (~10 ms),
    // proves the negative; there is no event to wait for instead
    expect(await poll('qa', 1)).toEqual([]);
    expect(await deadLetters()).toEqual([]);
  });

  it('fan-out: the four members that ack get it once; only the fifth dead-letters', async () => {
    t = await startTestAdapter({ leaseMs: '100', retryBaseMs: '5', maxRetries: '3' });
    const sent = await send('orchestrator', 'all-agents');
    const members = ['pm', 'engineering', 'qa', 'research'];
    for (const m of members) {
      const got = await poll(m);
      expect(got).toHaveLength(1);
      await ack(m, [got[0].delivery_id]);
    }
    for (let i = 0; i < 4; i++) expect(await poll('growth')).toHaveLength(1); // never acked
    // the fourth lease runs out: growth's dead letter raises an alert, which orchestrator's long
    // poll answers with as soon as it is committed
    const alerts = await poll('orchestrator');
    expect(alerts.map((a) => [a.message.kind, a.message.payload.recipient])).toEqual([
      ['alert/dead-letter', 'growth'],
    ]);
    for (const m of members) expect(await poll(m, 0)).toEqual([]);
    const dead = await deadLetters();
    expect(dead.map((d) => [d.recipient, d.reason, d.message.message_id])).toEqual([
      ['growth', 'lease_expired', sent.body.message_id],
    ]);
  });

  it('replays a dead letter once, with its attempts reset; a second replay is harmless', async () => {
    t = await startTestAdapter({ leaseMs: '100', retryBaseMs: '5', maxRetries: '0' });
    await send('pm', '@qa');
    await poll('qa');
    // the lease runs out (no retries): a dead letter, and an alert that orchestrator's long poll
    // answers with as soon as it is committed; acked, so that it does not dead-letter in turn
    const alerts = await poll('orchestrator');
    expect(alerts.map((a) => [a.message.kind, a.message.payload.recipient])).toEqual([
      ['alert/dead-letter', 'qa'],
    ]);
    const alertIds = alerts.map((a) => a.delivery_id as number);
    await ack('orchestrator', alertIds);
    const [dead] = await deadLetters();
    expect(dead).toBeDefined();
    const r1 = await call(t.url, 'POST', `/v1/dead-letters/${dead.id}/replay`, {
      agent: 'orchestrator',
    });
    const r2 = await call(t.url, 'POST', `/v1/dead-letters/${dead.id}/replay`, {
      agent: 'orchestrator',
    });
    expect(r1.status).toBe(201);
    expect(r2.status).toBe(200);
    expect(r2.body).toEqual({ delivery_id: r1.body.delivery_id, replayed: false });
    const again = await poll('qa');
    expect(again).toHaveLength(1);
    expect(again[0]).toMatchObject({ delivery_id: r1.body.delivery_id, attempt: 1 });
    expect(
      (await call(t.url, 'POST', '/v1/dead-letters/999/replay', { agent: 'orchestrator' })).status,
    ).toBe(404);
    expect((await call(t.url, 'GET', '/v1/dead-letters', { agent: 'pm' })).status).toBe(403);
  });
});

describe('bounded queues', () => {
  it('evicts the oldest normal deliveries past the bound, never a critical one', async () => {
    t = await startTestAdapter({ queueCapacity: '500' });
    // 600 messages to qa: every fifth critical
    const batch = (from: number) =>
      call(t!.url, 'POST', '/v1/messages/batch', {
        agent: 'pm',
        body: {
          messages: Array.from({ length: 100 }, (_, j) => ({
            idempotency_key: randomUUID(),
            to: '@qa',
            kind: 'status',
            priority: (from + j) % 5 === 0 ? 'critical' : 'normal',
            payload: { n: from + j },
          })),
        },
      });
    for (let i = 0; i < 600; i += 100) expect((await batch(i)).status).toBe(200);
    const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
    expect(hb.body).toEqual({ pending: 500, critical_pending: 120 });
    const dead = await deadLetters();
    expect(dead).toHaveLength(100);
    expect(dead.every((d) => d.reason === 'evicted' && d.message.priority === 'normal')).toBe(true);
    // the oldest normal ones: n = 1..4, 6..9, ... the first 100 non-multiples of 5
    const expected = Array.from({ length: 125 }, (_, i) => i)
      .filter((n) => n % 5 !== 0)
      .slice(0, 100);
    expect(dead.map((d) => d.message.payload.n)).toEqual(expected);
  });

  it('a queue of criticals only: a normal one is dead-lettered at once, a critical one overruns with an alert', async () => {
    t = await startTestAdapter({ queueCapacity: '2' });
    await send('pm', '@qa', { priority: 'critical' });
    await send('pm', '@qa', { priority: 'critical' });
    const normal = await send('pm', '@qa');
    expect(normal.status).toBe(201); // stored: the sender's message is safe, the delivery is a dead letter
    const critical = await send('pm', '@qa', { priority: 'critical' });
    expect(critical.status).toBe(201);
    expect((await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body).toEqual({
      pending: 3,
      critical_pending: 3,
    });
    const dead = await deadLetters();
    expect(dead.map((d) => [d.reason, d.message.message_id])).toEqual([
      ['queue_full', normal.body.message_id],
    ]);
    const alerts = (await poll('orchestrator', 1)).map((d) => d.message);
    expect(alerts.map((m) => [m.kind, m.payload.reason, m.payload.recipient])).toEqual([
      ['alert/dead-letter', 'queue_full', 'qa'],
      ['alert/overrun', 'critical_overrun', 'qa'],
    ]);
  });
});
