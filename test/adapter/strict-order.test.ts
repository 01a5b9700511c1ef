/**
 * Strict order inside a channel, also after failures (docs/design/delivery.md, "Strict order"):
 * "start task X" is always handed over before "cancel task X", even when the first attempt at
 * "start" is nacked or its lease runs out; a dead letter releases the channel. Black-box over HTTP
 * with a real SQLite store.
 *
 * No test sleeps on a guess: a retry's backoff is passed by moving the adapter's clock (the
 * `now` option), and a lease that really runs out (leaseMs 1000) is waited for with a long poll,
 * which answers as soon as the redelivery is committed.
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

const send = (agent: string, to: string, kind: string, payload: object, extra: object = {}) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind, payload, ...extra },
  }).then((r) => {
    expect(r.status).toBe(201);
    return r.body.message_id as string;
  });

/** pm asks engineering, directly, to start task X and then to cancel it. */
async function startThenCancel(): Promise<{ start: string; cancel: string }> {
  const start = await send('pm', '@engineering', 'task/request', {
    task_id: 'X',
    description: 'start task X',
  });
  const cancel = await send('pm', '@engineering', 'task/cancel', { task_id: 'X' });
  return { start, cancel };
}

/** A poll; with `wait` it is a long poll that answers as soon as something is handed over. */
const poll = (agent: string, { wait = 0, max = 10 } = {}) =>
  call(t!.url, 'GET', `/v1/inbox?wait=${wait}&max=${max}`, { agent }).then((r) => {
    expect(r.status).toBe(200);
    return r.body.deliveries as Json[];
  });
const nack = (agent: string, body: object) =>
  call(t!.url, 'POST', '/v1/nacks', { agent, body }).then((r) => {
    expect(r.status).toBe(200);
    return r.body;
  });
const ids = (ds: Json[]) => ds.map((d) => d.message.message_id as string);

describe('strict order per recipient and channel', { timeout: 60_000 }, () => {
  it('a nacked "start" holds back "cancel" until it comes back, and then comes first', async () => {
    let now = Date.now();
    t = await startTestAdapter({ retryBaseMs: '1000' }, { now: () => now });
    const { start, cancel } = await startThenCancel();
    // a later message of another channel, which the held-back channel must not block
    const other = await send('pm', 'product', 'status', { n: 1 });

    const [first] = await poll('engineering', { max: 1 });
    expect(ids([first])).toEqual([start]);
    expect(await nack('engineering', { delivery_ids: [first.delivery_id] })).toEqual({
      nacked: [first.delivery_id],
      ignored: [],
      unknown: [],
    });

    // during start's backoff (0.75 to 1.25 s on the adapter's clock): product flows, but
    // nothing of @engineering, though "cancel" is pending and ready
    const during = await poll('engineering');
    expect(ids(during)).toEqual([other]);
    expect(await poll('engineering')).toEqual([]);

    now += 2000; // past the longest backoff of a first retry
    const after = await poll('engineering');
    expect(ids(after)).toEqual([start, cancel]);
    expect(after.map((d) => d.attempt)).toEqual([2, 1]);
    expect(after[0].delivery_id).toBe(first.delivery_id);
  });

  it('a "start" whose lease ran out holds back "cancel", then both come back in order', async () => {
    t = await startTestAdapter({ leaseMs: '1000', retryBaseMs: '10' });
    const { start, cancel } = await startThenCancel();
    const [first] = await poll('engineering', { max: 1 });
    expect(ids([first])).toEqual([start]);

    // while "start" is leased, "cancel" is not handed over
    expect(await poll('engineering')).toEqual([]);

    // never acked: its lease runs out, and after its backoff it is handed over again, ahead of
    // "cancel"; the long polls answer as soon as something is handed over
    const back: Json[] = [];
    const deadline = Date.now() + 20_000;
    while (back.length < 2 && Date.now() < deadline) {
      back.push(...(await poll('engineering', { wait: 10 })));
    }
    expect(ids(back)).toEqual([start, cancel]);
    expect(back.map((d) => d.attempt)).toEqual([2, 1]);
  });

  it('"start" dead-lettered by a nack with retry false releases the channel: "cancel" follows at once', async () => {
    t = await startTestAdapter({ retryBaseMs: '10' });
    const { start, cancel } = await startThenCancel();
    const [first] = await poll('engineering', { max: 1 });
    expect(ids([first])).toEqual([start]);
    await nack('engineering', { delivery_ids: [first.delivery_id], retry: false });
    const next = await poll('engineering');
    expect(ids(next)).toEqual([cancel]);
    expect(next[0].attempt).toBe(1);
  });

  it('"start" dead-lettered after its last retry also releases the channel', async () => {
    t = await startTestAdapter({ maxRetries: '0', retryBaseMs: '10' });
    const { start, cancel } = await startThenCancel();
    const [first] = await poll('engineering', { max: 1 });
    expect(ids([first])).toEqual([start]);
    await nack('engineering', { delivery_ids: [first.delivery_id] }); // no retries left
    const dead = await call(t.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' });
    expect(dead.body.dead_letters.map((d: Json) => [d.reason, d.message.message_id])).toEqual([
      ['nacked', start],
    ]);
    expect(ids(await poll('engineering'))).toEqual([cancel]);
  });

  it('a later message of the channel is not handed over while an earlier one is leased, even in a later poll', async () => {
    t = await startTestAdapter();
    const { start } = await startThenCancel();
    expect(ids(await poll('engineering', { max: 1 }))).toEqual([start]);
    expect(await poll('engineering', { max: 100 })).toEqual([]);
    // "cancel" is still there, waiting behind "start"
    const hb = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'engineering' });
    expect(hb.body).toEqual({ pending: 2, critical_pending: 0 });
  });

  it('critical first across channels still holds, and a critical message never overtakes an earlier one of its own channel', async () => {
    t = await startTestAdapter();
    const direct = await send('pm', '@engineering', 'status', { n: 'direct' });
    const allNormal = await send('orchestrator', 'all-agents', 'status', { n: 'all, normal' });
    const product = await send('pm', 'product', 'status', { n: 'product' });
    const allCritical = await send(
      'orchestrator',
      'all-agents',
      'status',
      { n: 'all, critical' },
      {
        priority: 'critical',
      },
    );
    const got = await poll('engineering');
    // all-agents holds a critical delivery: its lane goes first, in sequence order; then the
    // others by their oldest delivery
    expect(ids(got)).toEqual([allNormal, allCritical, direct, product]);
    expect(got.map((d) => d.message.priority)).toEqual(['normal', 'critical', 'normal', 'normal']);
  });
});
