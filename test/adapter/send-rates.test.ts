/**
 * Per-sender rates through the adapter's HTTP API (docs/reference/configuration.md,
 * AGW_SEND_RATE/AGW_SEND_BURST), on a clock the test moves: past the burst 429 `rate_limited` with
 * Retry-After and nothing stored; a repeat of a stored key takes no token; in a batch the first
 * envelope without a token and every one after it are 429 (with `retry_after_s`); the topology's
 * own `send_rate` and `send_burst`; AGW_SEND_RATE=0 turns the limit off.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { compileTopology, TopologyError } from '../../src/adapter/topology.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { topologyObject } from '../helpers/topology.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

/** An adapter with these settings, on a clock the test moves. */
async function adapterWith(
  overrides: Record<string, string>,
  topology = topologyObject(),
): Promise<TestAdapter & { move: (ms: number) => void }> {
  let t = Date.UTC(2031, 0, 1);
  const a = await startTestAdapter(overrides, { now: () => t, topology });
  stops.push(a.stop);
  return Object.assign(a, {
    move: (ms: number) => {
      t += ms;
    },
  });
}

const msg = (n: number, extra: Record<string, unknown> = {}) => ({
  idempotency_key: randomUUID(),
  to: 'product',
  kind: 'status',
  payload: { n },
  ...extra,
});
const post = (a: TestAdapter, body: unknown, agent = 'pm') =>
  call(a.url, 'POST', '/v1/messages', { agent, body });
const batch = async (a: TestAdapter, messages: unknown[], agent = 'pm') => {
  const r = await call(a.url, 'POST', '/v1/messages/batch', { agent, body: { messages } });
  expect(r.status).toBe(200);
  return r.body.results as Json[];
};
/** The payloads' `n` of what `product` holds, in sequence order. */
const stored = async (a: TestAdapter): Promise<number[]> => {
  const r = await call(a.url, 'GET', '/v1/channels/product/messages?after=0&limit=1000', {
    agent: 'qa',
  });
  return (r.body.messages as Json[]).map((m) => m.payload.n as number);
};

describe('per-sender rates', () => {
  it('refuses past the burst with 429 rate_limited and Retry-After, stores nothing of it, and takes it once a token is back', async () => {
    const a = await adapterWith({ sendRate: '2', sendBurst: '3' });
    for (let n = 0; n < 3; n++) expect((await post(a, msg(n))).status).toBe(201);
    const over = msg(3);
    const refused = await post(a, over);
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ error: 'rate_limited' });
    expect(refused.body.message).toMatch(/pm sends faster than its rate \(2 a second, 3 at once\)/);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await stored(a)).toEqual([0, 1, 2]);
    a.move(500); // one token at 2 a second
    expect((await post(a, over)).status).toBe(201);
    expect((await post(a, msg(4))).status).toBe(429);
    expect(await stored(a)).toEqual([0, 1, 2, 3]);
    // the others have buckets of their own
    expect((await post(a, msg(9), 'qa')).status).toBe(201);
  });

  it('answers a repeat of a stored key before the rate: it takes no token, and is no 429 when the bucket is empty', async () => {
    const a = await adapterWith({ sendRate: '1', sendBurst: '2' });
    const first = msg(0);
    expect((await post(a, first)).status).toBe(201);
    for (let i = 0; i < 5; i++) {
      const again = await post(a, first);
      expect([again.status, again.body.duplicate]).toEqual([200, true]);
    }
    // the repeats took nothing: the burst's second token is still there
    expect((await post(a, msg(1))).status).toBe(201);
    // the bucket is empty now; a repeat is still a duplicate, another body with its key a 409
    expect((await post(a, first)).status).toBe(200);
    expect((await post(a, { ...first, payload: { n: 99 } })).body.error).toBe(
      'idempotency_conflict',
    );
    expect((await batch(a, [first])).map((r) => r.status)).toEqual([200]);
    expect((await post(a, msg(2))).status).toBe(429);
    expect(await stored(a)).toEqual([0, 1]);
  });

  it('refuses, in a batch, the first envelope without a token and every one after it with 429 and retry_after_s; sent again later, the rest is stored in order', async () => {
    const a = await adapterWith({ sendRate: '1', sendBurst: '4' });
    const earlier = msg(-1);
    expect((await post(a, earlier)).status).toBe(201); // three tokens left
    const m = [0, 1, 2, 3, 4].map((n) => msg(n));
    const results = await batch(a, [
      ...m.slice(0, 4),
      earlier, // a repeat of a stored key: 200 on its own
      { to: 'product' }, // invalid: 400 on its own
    ]);
    expect(results.map((r) => r.status)).toEqual([201, 201, 201, 429, 429, 429]);
    for (const r of results.slice(3)) {
      expect(r).toMatchObject({ error: 'rate_limited', retry_after_s: 1 });
    }
    expect(results[4].message).toMatch(/comes after message 3, which was rate limited/);
    expect(results[0]).not.toHaveProperty('retry_after_s');
    expect(await stored(a)).toEqual([-1, 0, 1, 2]);
    // a sidecar's drain sends the batch again: the stored ones are repeats, taking no token
    a.move(3000);
    const again = await batch(a, m);
    expect(again.map((r) => [r.status, r.channel_sequence_id])).toEqual([
      [200, 2],
      [200, 3],
      [200, 4],
      [201, 5],
      [201, 6],
    ]);
    expect(await stored(a)).toEqual([-1, 0, 1, 2, 3, 4]);
  });

  it('is off with AGW_SEND_RATE=0', async () => {
    const a = await adapterWith({ sendRate: '0', sendBurst: '1' });
    for (let n = 0; n < 20; n++) expect((await post(a, msg(n))).status).toBe(201);
    const results = await batch(
      a,
      Array.from({ length: 100 }, (_, i) => msg(20 + i)),
    );
    expect(results.every((r) => r.status === 201)).toBe(true);
    expect(await stored(a)).toHaveLength(120);
  });

  it("takes an agent's own send_rate and send_burst from the topology over the defaults", async () => {
    const topology = topologyObject();
    for (const agent of topology.agents) {
      if (agent.id === 'pm') Object.assign(agent, { send_rate: 1, send_burst: 4 });
      if (agent.id === 'qa') Object.assign(agent, { send_rate: 0 });
      if (agent.id === 'research') Object.assign(agent, { send_rate: 5 });
    }
    // the default is off: pm's own limit holds even so; research's burst is the default's
    const a = await adapterWith({ sendRate: '0', sendBurst: '2' }, topology);
    const refusedAt = async (agent: string, max: number): Promise<number | undefined> => {
      for (let n = 0; n < max; n++) {
        const r = await post(a, msg(n), agent);
        if (r.status === 429) return n;
        expect(r.status).toBe(201);
      }
      return undefined;
    };
    expect(await refusedAt('pm', 10)).toBe(4);
    expect(await refusedAt('research', 10)).toBe(2);
    expect(await refusedAt('qa', 30)).toBeUndefined();
    expect(await refusedAt('engineering', 30)).toBeUndefined();
  });

  it('refuses a topology whose send_rate or send_burst is out of range, naming the agent', () => {
    const bad = (patch: object) => {
      const t = topologyObject();
      Object.assign(t.agents[1]!, patch);
      return () => compileTopology(t, 't.json');
    };
    expect(bad({ send_rate: -1 })).toThrow(TopologyError);
    expect(bad({ send_rate: -1 })).toThrow(/agents\.1\.send_rate: .* \(agent "pm"\)/);
    expect(bad({ send_burst: 0 })).toThrow(/agents\.1\.send_burst: .* \(agent "pm"\)/);
    expect(bad({ send_rate: 1.5 })).toThrow(/agents\.1\.send_rate/);
    expect(bad({ send_rate: 10, send_burst: 20 })).not.toThrow();
  });
});
