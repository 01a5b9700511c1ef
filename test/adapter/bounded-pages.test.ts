/**
 * Bounded pages (AGW_MAX_PAGE_BYTES): forty 200 KiB messages come back through replay and the
 * inbox in pages that never pass the bound, each holding at least one message, in order, with
 * `next_after` saying where to go on. The inbox leases only what it sends: the rest stays
 * pending. A message larger than the bound still comes, alone. Dead letters page the same way.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

const MIB = 1024 * 1024;
const BLOB = 'x'.repeat(200 * 1024);

/** A GET whose answer is kept as bytes too: the page bound is a bound on these. */
async function page(
  url: string,
  path: string,
  agent: string,
): Promise<{ bytes: number; body: Json }> {
  const res = await fetch(url + path, { headers: { authorization: `Bearer ${tokenOf(agent)}` } });
  const raw = Buffer.from(await res.arrayBuffer());
  expect(res.status).toBe(200);
  return { bytes: raw.length, body: JSON.parse(raw.toString('utf8')) };
}

describe('forty 200 KiB messages, pages of at most 1 MiB', () => {
  let t: TestAdapter;
  const ids: string[] = [];
  beforeAll(async () => {
    t = await startTestAdapter({ maxPageBytes: String(MIB) });
    for (let n = 1; n <= 40; n++)
      ids.push(await sendAs(t.url, 'pm', 'product', 'status', { n, blob: BLOB }));
  }, 60_000);
  afterAll(async () => {
    await t.stop();
  });

  it('replays them in bounded pages, going on with next_after until an empty page', async () => {
    const sizes: number[] = [];
    const seen: number[] = [];
    let after = 0;
    for (;;) {
      const { bytes, body } = await page(
        t.url,
        `/v1/channels/product/messages?after=${after}&limit=1000`,
        'qa',
      );
      if (body.messages.length === 0) {
        expect(body.next_after).toBeNull();
        break;
      }
      sizes.push(bytes);
      expect(bytes).toBeLessThanOrEqual(MIB);
      const seqs = body.messages.map((m: Json) => m.channel_sequence_id);
      expect(body.next_after).toBe(seqs.at(-1));
      // the delivery states cover exactly the page's messages
      expect(Object.keys(body.delivery_states).sort()).toEqual(
        body.messages.map((m: Json) => m.message_id).sort(),
      );
      seen.push(...body.messages.map((m: Json) => m.payload.n));
      after = body.next_after;
    }
    expect(seen).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    // 40 × 200 KiB is 8 MiB: at least eight pages, each well filled (four or five messages)
    expect(sizes.length).toBeGreaterThanOrEqual(8);
    expect(Math.min(...sizes.slice(0, -1))).toBeGreaterThan(MIB / 2);
  });

  it('hands them out in bounded polls, leasing only what each poll sends', async () => {
    const seen: number[] = [];
    while (seen.length < 40) {
      const { bytes, body } = await page(t.url, '/v1/inbox?max=100&wait=0', 'qa');
      const got = body.deliveries as Json[];
      expect(got.length).toBeGreaterThan(0);
      expect(got.length).toBeLessThan(40);
      expect(bytes).toBeLessThanOrEqual(MIB);
      seen.push(...got.map((d) => d.message.payload.n));
      const next = seen.length;
      if (next < 40) {
        // the next message of the channel was not sent, so it must not be leased either
        const s = await call(t.url, 'GET', `/v1/messages/${ids[next]}`, { agent: 'pm' });
        const qa = s.body.recipients.find((r: Json) => r.agent === 'qa');
        expect(qa).toMatchObject({ state: 'pending', attempts: 0 });
      }
      const ack = await call(t.url, 'POST', '/v1/acks', {
        agent: 'qa',
        body: { delivery_ids: got.map((d) => d.delivery_id) },
      });
      expect(ack.body.acked).toHaveLength(got.length);
    }
    expect(seen).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  });
});

describe('a bound smaller than one message', () => {
  let t: TestAdapter;
  beforeAll(async () => {
    t = await startTestAdapter({ maxPageBytes: '65536', maxRetries: '0' });
  });
  afterAll(async () => {
    await t.stop();
  });

  it('still answers one message a page: replay, inbox and dead letters', async () => {
    for (let n = 1; n <= 3; n++) await sendAs(t.url, 'pm', '@qa', 'status', { n, blob: BLOB });

    const replayed: number[] = [];
    let after = 0;
    for (;;) {
      const { body } = await page(t.url, `/v1/channels/%40qa/messages?after=${after}`, 'qa');
      if (body.next_after === null) break;
      expect(body.messages).toHaveLength(1);
      replayed.push(body.messages[0].payload.n);
      after = body.next_after;
    }
    expect(replayed).toEqual([1, 2, 3]);

    // each poll hands over one, and the agent refuses it for good: three dead letters
    for (let n = 1; n <= 3; n++) {
      const { body } = await page(t.url, '/v1/inbox?max=10', 'qa');
      expect(body.deliveries.map((d: Json) => d.message.payload.n)).toEqual([n]);
      const nack = await call(t.url, 'POST', '/v1/nacks', {
        agent: 'qa',
        body: { delivery_ids: [body.deliveries[0].delivery_id], retry: false, reason: 'test' },
      });
      expect(nack.status).toBe(200);
    }

    const dead: number[] = [];
    after = 0;
    for (;;) {
      const { body } = await page(t.url, `/v1/dead-letters?after=${after}`, 'orchestrator');
      if (body.next_after === null) {
        expect(body.dead_letters).toEqual([]);
        break;
      }
      expect(body.dead_letters).toHaveLength(1);
      expect(body.next_after).toBe(body.dead_letters[0].id);
      dead.push(body.dead_letters[0].message.payload.n);
      after = body.next_after;
    }
    expect(dead).toEqual([1, 2, 3]);
  });

  it('keeps a page of small messages to limit, not to one', async () => {
    const keys = Array.from({ length: 5 }, () => randomUUID());
    for (const k of keys) {
      const r = await call(t.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: k, to: 'product', kind: 'status', payload: {} },
      });
      expect(r.status).toBe(201);
    }
    // the bound counts what a page holds, not what it might: 1000 asked for, all five come
    const all = await page(t.url, '/v1/channels/product/messages?limit=1000', 'qa');
    expect(all.body.messages.map((m: Json) => m.idempotency_key)).toEqual(keys);
    const { body } = await page(t.url, '/v1/channels/product/messages?limit=4', 'qa');
    expect(body.messages.map((m: Json) => m.idempotency_key)).toEqual(keys.slice(0, 4));
    expect(body.next_after).toBe(4);
  });
});
