/**
 * Acks carried on the poll through a real sidecar in front of a real adapter (both in-process,
 * real SQLite files): the adapter's ids ride on the sidecar's upstream poll; the sidecar's own
 * copies (negative ids) are settled locally; when the sidecar answers from what it holds
 * without polling upstream, the adapter's ids go up on their own as POST /v1/acks. A loopback
 * proxy between the two records what the sidecar asked of the adapter.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, recordingProxy, sendAs } from '../helpers/http.js';
import { startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';

/** The recording proxy; `take(...paths)`: the requests to these paths, forgetting them all. */
async function takingProxy(target: string) {
  const proxy = await recordingProxy(target);
  return {
    ...proxy,
    take: (...paths: string[]) =>
      proxy.seen.splice(0).filter((s) => paths.some((p) => s.split(' ')[1]!.startsWith(p))),
  };
}

let stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.reverse()) await stop();
  stops = [];
});

interface Stack {
  adapter: TestAdapter;
  proxy: Awaited<ReturnType<typeof takingProxy>>;
  sidecar: TestSidecar;
}

async function stack(): Promise<Stack> {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const proxy = await takingProxy(adapter.url);
  stops.push(proxy.close);
  const sidecar = await startTestSidecar('qa', proxy.url);
  stops.push(sidecar.stop);
  return { adapter, proxy, sidecar };
}

const UPSTREAM = ['/v1/inbox', '/v1/acks'];

const poll = async (s: Stack, max = 10) => {
  const r = await call(s.sidecar.url, 'GET', `/v1/inbox?wait=0&max=${max}`);
  expect(r.status).toBe(200);
  return r.body.deliveries as Json[];
};
const carry = (s: Stack, ids: number[], max = 10) =>
  call(s.sidecar.url, 'POST', `/v1/inbox?wait=0&max=${max}`, { body: { delivery_ids: ids } });
const n = (ds: Json[]) => ds.map((d) => d.message.payload.n);

/** qa's delivery state of a message pm sent, asked at the adapter. */
async function stateAtAdapter(s: Stack, messageId: string): Promise<string> {
  const r = await call(s.adapter.url, 'GET', `/v1/messages/${messageId}`, { agent: 'pm' });
  expect(r.status).toBe(200);
  return (r.body.recipients as Json[]).find((x) => x.agent === 'qa').state;
}

/**
 * qa has seen n=0 through the sidecar; n=1 is then taken and acked with qa's token at the
 * adapter, behind the sidecar's back: the gap is filled with a copy of the sidecar's own.
 * Returns the ids of n=1 and n=2 and the sidecar's answer holding the copy.
 */
async function copyOfStolen(s: Stack) {
  await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 0 });
  const seen = await poll(s);
  expect(n(seen)).toEqual([0]);
  expect((await carry(s, [seen[0].delivery_id])).status).toBe(200);
  const one = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 1 });
  const two = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 2 });
  const stolen = await call(s.adapter.url, 'GET', '/v1/inbox?max=1', { agent: 'qa' });
  expect(n(stolen.body.deliveries)).toEqual([1]);
  const acked = await call(s.adapter.url, 'POST', '/v1/acks', {
    agent: 'qa',
    body: { delivery_ids: [stolen.body.deliveries[0].delivery_id] },
  });
  expect(acked.body.acked).toHaveLength(1);
  return { one, two };
}

describe('POST /v1/inbox through the sidecar', { timeout: 20_000 }, () => {
  it("acks the leased message and hands over its channel successor, the ack riding on the sidecar's poll", async () => {
    const s = await stack();
    const first = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 1 });
    const second = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 2 });
    const got = await poll(s, 1);
    expect(n(got)).toEqual([1]);
    expect(await poll(s)).toEqual([]); // strict order: the second waits behind the first
    const id = got[0].delivery_id as number;
    s.proxy.take();

    const res = await carry(s, [id]);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['acked', 'dead_lettered', 'unknown', 'deliveries']);
    expect(res.body).toMatchObject({ acked: [id], dead_lettered: [], unknown: [] });
    expect(n(res.body.deliveries)).toEqual([2]);
    expect(res.body.deliveries[0].message.message_id).toBe(second);
    // one request upstream, the ack carried on the poll
    expect(s.proxy.take(...UPSTREAM)).toEqual(['POST /v1/inbox?wait=0&max=10']);
    expect(await stateAtAdapter(s, first)).toBe('acked');
    expect(await stateAtAdapter(s, second)).toBe('leased');
  });

  it('an ack carried for an id acked before is harmless', async () => {
    const s = await stack();
    await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 1 });
    const second = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 2 });
    const [d1] = await poll(s, 1);
    const acked = await call(s.sidecar.url, 'POST', '/v1/acks', {
      body: { delivery_ids: [d1.delivery_id] },
    });
    expect(acked.body.acked).toEqual([d1.delivery_id]);
    const [d2] = await poll(s);
    expect(d2.message.message_id).toBe(second);

    // carried again: answered as acked, nothing else moves (n=2 stays leased, not handed again)
    const again = await carry(s, [d1.delivery_id]);
    expect(again.status).toBe(200);
    expect(again.body).toEqual({
      acked: [d1.delivery_id],
      dead_lettered: [],
      unknown: [],
      deliveries: [],
    });
    expect(await stateAtAdapter(s, second)).toBe('leased');

    // and the next carried ack goes on as usual
    const third = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 3 });
    const next = await carry(s, [d2.delivery_id, d1.delivery_id]);
    expect(next.body.acked).toEqual([d2.delivery_id, d1.delivery_id]);
    expect(next.body.deliveries.map((d: Json) => d.message.message_id)).toEqual([third]);
    expect(await stateAtAdapter(s, second)).toBe('acked');
  });

  it("a sidecar copy (negative id) acked on the poll is settled and released its channel's next", async () => {
    const s = await stack();
    const { two } = await copyOfStolen(s);
    const copy = await poll(s, 1);
    expect(n(copy)).toEqual([1]);
    const copyId = copy[0].delivery_id as number;
    expect(copyId).toBeLessThan(0);
    const three = await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 3 });

    s.proxy.take();
    const res = await carry(s, [copyId]);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['acked', 'dead_lettered', 'unknown', 'deliveries']);
    expect(res.body).toMatchObject({ acked: [copyId], dead_lettered: [], unknown: [] });
    // the copy settled, n=2 (held back behind it) comes in the same answer; n=3 waits behind 2
    expect(n(res.body.deliveries)).toEqual([2]);
    expect(res.body.deliveries[0].message.message_id).toBe(two);
    // a copy is the sidecar's: no ack of it went to the adapter
    expect(s.proxy.take('/v1/acks')).toEqual([]);

    // settled: no longer leased, and never handed again
    const ext = await call(s.sidecar.url, 'POST', '/v1/leases', {
      body: { delivery_ids: [copyId], extend_ms: 60_000 },
    });
    expect([ext.status, ext.body.error]).toEqual([409, 'not_leased']);
    const after = await carry(s, [res.body.deliveries[0].delivery_id]);
    expect(after.body.acked).toEqual([res.body.deliveries[0].delivery_id]);
    expect(after.body.deliveries.map((d: Json) => d.message.message_id)).toEqual([three]);
    expect(await stateAtAdapter(s, two)).toBe('acked');
  });

  it('answering from what it holds, without polling upstream, it still acks the adapter ids', async () => {
    const s = await stack();
    const { two } = await copyOfStolen(s);
    const product = await sendAs(s.adapter.url, 'pm', 'product', 'status', { n: 10 });
    // the copy of n=1, n=2 behind it, and the product message
    const got = await poll(s);
    expect(n(got).sort((a: number, b: number) => a - b)).toEqual([1, 2, 10]);
    const byN = new Map(got.map((d) => [d.message.payload.n as number, d.delivery_id as number]));
    const copyId = byN.get(1)!;
    expect(copyId).toBeLessThan(0);
    // the copy nacked: due again at once, held by the sidecar
    const nacked = await call(s.sidecar.url, 'POST', '/v1/nacks', {
      body: { delivery_ids: [copyId] },
    });
    expect(nacked.body.nacked).toEqual([copyId]);

    s.proxy.take();
    const ids = [byN.get(2)!, byN.get(10)!];
    const res = await carry(s, ids, 1); // max 1: the copy fills it
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['acked', 'dead_lettered', 'unknown', 'deliveries']);
    expect(res.body).toMatchObject({ acked: ids, dead_lettered: [], unknown: [] });
    expect(
      res.body.deliveries.map((d: Json) => [d.delivery_id, d.attempt, d.message.payload.n]),
    ).toEqual([[copyId, 2, 1]]);
    // no upstream poll; the acks went on their own
    expect(s.proxy.take(...UPSTREAM)).toEqual(['POST /v1/acks']);
    expect(await stateAtAdapter(s, two)).toBe('acked');
    expect(await stateAtAdapter(s, product)).toBe('acked');
  });
});
