/**
 * The receive loop extends the leases it holds while a handler runs: against a real adapter
 * with a 1 s lease, a handler that takes longer keeps its message (attempt 1, never handed out
 * again, acked at the end); with fake timers and a scripted fetch, the exact schedule: half of
 * each lease left, failed extensions retried without ending the loop, 409 not_leased given up,
 * nothing extended once the handler settled.
 */
import { afterEach, expect, it, vi } from 'vitest';
import { type Delivery, GatewayClient, GatewayClientError } from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await t?.stop();
  t = undefined;
});

interface LeaseCall {
  body: { delivery_ids: number[]; extend_ms: number };
  status: number;
  startedAt: number;
  answeredAt: number;
}

it('a handler longer than the lease keeps its message: extended, never handed out again, acked', {
  timeout: 30_000,
}, async () => {
  t = await startTestAdapter({ leaseMs: '1000' });
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const sent = await pm.send({
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-long', description: 'longer than one lease' },
  });
  if (sent.status !== 'delivered') throw new Error('not delivered');

  // every extension the client makes, seen through its fetch
  const leases: LeaseCall[] = [];
  let changed = () => {};
  const qa = new GatewayClient({
    url: t.url,
    token: tokenOf('qa'),
    fetch: async (input, init) => {
      const startedAt = Date.now();
      const res = await fetch(input, init);
      if (String(input).endsWith('/v1/leases')) {
        leases.push({
          body: JSON.parse(String(init?.body)),
          status: res.status,
          startedAt,
          answeredAt: Date.now(),
        });
        changed();
      }
      return res;
    },
  });

  const handled: Delivery[] = [];
  const leaseErrors: unknown[] = [];
  const handlerErrors: unknown[] = [];
  let during: unknown;
  let settledAt = 0;
  const controller = new AbortController();
  await qa.receive(
    async (m, d) => {
      handled.push(d);
      const originalEnd = Date.parse(d.lease_expires_at);
      // go on until the lease was extended three times, the last one answered after the
      // lease the adapter first gave had ended: the message was kept past it
      const kept = await new Promise<boolean>((resolve) => {
        // a generous bound, only so that a missing extension fails with its name
        const bound = setTimeout(() => resolve(false), 15_000);
        changed = () => {
          const ok = leases.filter((l) => l.status === 200);
          if (ok.length >= 3 && ok.at(-1)!.answeredAt > originalEnd) {
            clearTimeout(bound);
            resolve(true);
          }
        };
        changed();
      });
      if (!kept) {
        controller.abort();
        throw new Error('the lease was not extended past its first end within 15 s');
      }
      during = (await pm.messageStatus(m.message_id)).recipients;
      settledAt = Date.now();
      controller.abort();
    },
    {
      waitS: 1,
      signal: controller.signal,
      onError: (e) => handlerErrors.push(e),
      onLeaseError: (e) => leaseErrors.push(e),
    },
  );

  expect(handlerErrors).toEqual([]);

  expect(handled).toHaveLength(1);
  expect(handled[0]!.attempt).toBe(1);
  // past the first lease's end the adapter still held it leased to qa, first attempt
  expect(during).toEqual([expect.objectContaining({ agent: 'qa', state: 'leased', attempts: 1 })]);
  expect(leaseErrors).toEqual([]);
  for (const l of leases) {
    // this delivery, by the lease the adapter gave (1 s; the default, bounded below by 1 s)
    expect(l.body).toEqual({ delivery_ids: [handled[0]!.delivery_id], extend_ms: 1000 });
    expect(l.status).toBe(200);
    expect(l.startedAt).toBeLessThanOrEqual(settledAt);
  }
  const after = await pm.messageStatus(sent.message_id);
  expect(after.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'acked', attempts: 1 }),
  ]);
  const inbox = await call(t.url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' });
  expect(inbox.body.deliveries).toEqual([]);
});

/** A Response as the adapter would answer. */
function answer(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json' },
  });
}

function delivery(id: number, leaseEnd: number): Delivery {
  return {
    delivery_id: id,
    attempt: 1,
    lease_expires_at: new Date(leaseEnd).toISOString(),
    message: {
      message_id: `m-${id}`,
      channel: '@qa',
      channel_sequence_id: id,
      sender: 'pm',
      timestamp_iso8601: new Date(0).toISOString(),
      idempotency_key: `k-${id}`,
      to: '@qa',
      kind: 'task/request',
      priority: 'normal',
      thread_id: `m-${id}`,
      hop: 0,
      payload: { task_id: `T-${id}`, description: '...' },
    },
  };
}

/**
 * A scripted adapter behind a fake fetch: the first poll hands over `deliveries`, later polls
 * wait for the abort; each POST /v1/leases is answered by `lease(body)`; every call is logged
 * with the (fake) time it was made.
 */
function scripted(
  deliveries: Delivery[],
  lease: (body: { delivery_ids: number[]; extend_ms: number }) => Response,
) {
  const calls: { path: string; body: Json; at: number }[] = [];
  let polls = 0;
  const fetchFn: typeof fetch = async (input, init) => {
    const path = new URL(String(input)).pathname;
    const body = init?.body === undefined ? undefined : JSON.parse(String(init.body));
    calls.push({ path, body, at: Date.now() });
    if (path === '/v1/inbox') {
      if (polls++ === 0) return answer(200, { deliveries });
      const signal = init?.signal;
      return new Promise<Response>((_, reject) => {
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    }
    if (path === '/v1/leases') return lease(body);
    if (path === '/v1/acks')
      return answer(200, { acked: body.delivery_ids, dead_lettered: [], unknown: [] });
    if (path === '/v1/nacks')
      return answer(200, { nacked: body.delivery_ids, ignored: [], unknown: [] });
    return answer(404, { error: 'not_found', message: path });
  };
  const leaseCalls = () => calls.filter((c) => c.path === '/v1/leases');
  return { fetchFn, calls, leaseCalls };
}

/** Resolves when released: a handler's long work. */
function gate() {
  let release = () => {};
  const done = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { done, release };
}

it('extends when half the lease is left, retries a failed extension, stops once the handler settled', async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'], now: 1_000_000 });
  const t0 = Date.now();
  const plays: (() => Response)[] = [
    () => {
      throw new TypeError('fetch failed'); // no answer
    },
    () => answer(503, { error: 'overloaded', message: 'busy' }),
    () => answer(200, { leases: [] }),
    () => answer(200, { leases: [] }),
  ];
  const s = scripted([delivery(7, t0 + 10_000)], () =>
    (plays.shift() ?? (() => answer(200, { leases: [] })))(),
  );
  const qa = new GatewayClient({ url: 'http://agent.test', fetch: s.fetchFn });
  const work = gate();
  const leaseErrors: unknown[] = [];
  let handled = 0;
  const controller = new AbortController();
  const loop = qa.receive(
    async () => {
      handled++;
      await work.done;
    },
    { signal: controller.signal, onLeaseError: (e) => leaseErrors.push(e) },
  );

  await vi.advanceTimersByTimeAsync(12_000);
  // at 5 s (half of the 10 s lease left): no answer; again 250 ms later: 503; 500 ms later:
  // extended by 10 s (the lease the adapter gave), so the next at half of that: 10.75 s
  expect(s.leaseCalls().map((c) => c.at - t0)).toEqual([5_000, 5_250, 5_750, 10_750]);
  for (const c of s.leaseCalls()) expect(c.body).toEqual({ delivery_ids: [7], extend_ms: 10_000 });
  expect(leaseErrors).toHaveLength(2);
  expect(leaseErrors[0]).toBeInstanceOf(TypeError);
  expect(leaseErrors[1]).toMatchObject({ status: 503, code: 'overloaded' });

  work.release();
  await vi.advanceTimersByTimeAsync(0);
  // the poll's last delivery: its ack rides on the next poll (POST /v1/inbox)
  const carried = () =>
    s.calls.filter((c) => c.path === '/v1/inbox' && c.body !== undefined).map((c) => c.body);
  expect(carried()).toEqual([{ delivery_ids: [7] }]);
  // settled: a whole minute more and nothing is extended
  await vi.advanceTimersByTimeAsync(60_000);
  expect(s.leaseCalls()).toHaveLength(4);
  expect(handled).toBe(1);

  controller.abort();
  await loop;
  // the poll carrying it was never answered: sent again on its own as the loop stops
  expect(s.calls.filter((c) => c.path === '/v1/acks').map((c) => c.body)).toEqual([
    { delivery_ids: [7] },
  ]);
});

it('gives up a lease no longer held (409 not_leased) and keeps the others of the poll', async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'], now: 2_000_000 });
  const t0 = Date.now();
  const lost = new Set<number>([2]); // delivery 2 expired at the adapter meanwhile
  const s = scripted([delivery(1, t0 + 4_000), delivery(2, t0 + 4_000)], (body) =>
    body.delivery_ids.some((id) => lost.has(id))
      ? answer(409, { error: 'not_leased', message: 'not leased any more' })
      : answer(200, {
          leases: body.delivery_ids.map((id) => ({ delivery_id: id, lease_expires_at: '' })),
        }),
  );
  const qa = new GatewayClient({ url: 'http://agent.test', fetch: s.fetchFn });
  const first = gate();
  const handled: number[] = [];
  const leaseErrors: { err: unknown; ids: number[] }[] = [];
  const controller = new AbortController();
  const loop = qa.receive(
    async (_m, d) => {
      handled.push(d.delivery_id);
      if (d.delivery_id === 1) await first.done;
      else controller.abort();
    },
    {
      signal: controller.signal,
      extendLeaseMs: 3_000,
      onLeaseError: (err, ids) => leaseErrors.push({ err, ids }),
    },
  );

  await vi.advanceTimersByTimeAsync(2_000);
  // both held (2 waits its turn) in one request; refused whole, so each alone: 1 kept, 2 not
  expect(s.leaseCalls().map((c) => c.body)).toEqual([
    { delivery_ids: [1, 2], extend_ms: 3_000 },
    { delivery_ids: [1], extend_ms: 3_000 },
    { delivery_ids: [2], extend_ms: 3_000 },
  ]);
  expect(leaseErrors).toHaveLength(1);
  expect(leaseErrors[0]!.ids).toEqual([2]);
  expect(leaseErrors[0]!.err).toBeInstanceOf(GatewayClientError);
  expect(leaseErrors[0]!.err).toMatchObject({ status: 409, code: 'not_leased' });

  // then 1 alone, at half of its 3 s: 1.5 s after it was extended; until it too is lost
  await vi.advanceTimersByTimeAsync(1_500);
  expect(
    s
      .leaseCalls()
      .slice(3)
      .map((c) => [c.at - t0, c.body]),
  ).toEqual([[3_500, { delivery_ids: [1], extend_ms: 3_000 }]]);
  lost.add(1);
  await vi.advanceTimersByTimeAsync(1_500);
  expect(s.leaseCalls()).toHaveLength(5);
  expect(leaseErrors).toHaveLength(2);
  // not leased: no more tries, though its handler still runs
  await vi.advanceTimersByTimeAsync(60_000);
  expect(s.leaseCalls()).toHaveLength(5);
  expect(handled).toEqual([1]);

  first.release();
  await vi.advanceTimersByTimeAsync(0);
  await loop;
  expect(handled).toEqual([1, 2]);
  expect(s.calls.filter((c) => c.path === '/v1/acks').map((c) => c.body)).toEqual([
    { delivery_ids: [1] },
    { delivery_ids: [2] },
  ]);
});

it('extends only the deliveries not settled yet: one whose handler ended is left out', async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'], now: 3_000_000 });
  const t0 = Date.now();
  const s = scripted([delivery(1, t0 + 4_000), delivery(2, t0 + 4_000)], (body) =>
    answer(200, {
      leases: body.delivery_ids.map((id) => ({ delivery_id: id, lease_expires_at: '' })),
    }),
  );
  const qa = new GatewayClient({ url: 'http://agent.test', fetch: s.fetchFn });
  const first = gate();
  const second = gate();
  const controller = new AbortController();
  const loop = qa.receive(
    async (_m, d) => {
      if (d.delivery_id === 1) await first.done;
      else {
        await second.done;
        controller.abort();
      }
    },
    { signal: controller.signal },
  );

  await vi.advanceTimersByTimeAsync(1_000);
  first.release(); // 1 done at 1 s, before any extension; 2 runs on
  await vi.advanceTimersByTimeAsync(4_500);
  // at half of the 4 s lease, then at half of each 4 s extension: 2 alone each time
  expect(s.leaseCalls().map((c) => [c.at - t0, c.body.delivery_ids])).toEqual([
    [2_000, [2]],
    [4_000, [2]],
  ]);
  second.release();
  await loop;
  await vi.advanceTimersByTimeAsync(60_000);
  expect(s.leaseCalls()).toHaveLength(2);
});
