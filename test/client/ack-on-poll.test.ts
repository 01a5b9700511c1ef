/**
 * The client's receive loop carries the ack of a poll's last delivery on its next poll
 * (POST /v1/inbox), acks the batch's others at once, sends a still-carried ack on its own when
 * stopped, and falls back to POST /v1/acks for good after a 405 from an older gateway. Against
 * a real adapter; a loopback proxy in between records the requests (and, for the 405 case,
 * answers POST /v1/inbox as a gateway without it would).
 */
import { afterEach, expect, it } from 'vitest';
import { GatewayClient, type Message } from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, recordingProxy, sendAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

/** The recording proxy; with `refuseCarry`, POST /v1/inbox is 405 as on a gateway without it. */
async function carryProxy(target: string, { refuseCarry = false } = {}) {
  const proxy = await recordingProxy(target, (req, res) => {
    if (!refuseCarry || req.method !== 'POST' || !req.url?.startsWith('/v1/inbox')) return false;
    req.resume();
    res.writeHead(405, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ error: 'method_not_allowed', message: '/v1/inbox takes GET, not POST' }),
    );
    return true;
  });
  return {
    ...proxy,
    /** Inbox and ack requests (method and path), in order. */
    deliveryCalls: () =>
      proxy.seen.map((s) => s.split('?')[0]!).filter((s) => /\/v1\/(inbox|acks|nacks)$/.test(s)),
  };
}

let stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.reverse()) await stop();
  stops = [];
});

async function stack(opts: { refuseCarry?: boolean } = {}) {
  const adapter: TestAdapter = await startTestAdapter();
  stops.push(adapter.stop);
  const proxy = await carryProxy(adapter.url, opts);
  stops.push(proxy.close);
  const qa = new GatewayClient({ url: proxy.url, token: tokenOf('qa') });
  return { adapter, proxy, qa };
}

/** qa's delivery state of each message, asked at the adapter as its sender. */
async function states(url: string, sent: { id: string; sender: string }[]): Promise<string[]> {
  const out: string[] = [];
  for (const { id, sender } of sent) {
    const r = await call(url, 'GET', `/v1/messages/${id}`, { agent: sender });
    out.push((r.body.recipients as Json[]).find((x) => x.agent === 'qa').state);
  }
  return out;
}

/** Runs the loop until `count` messages were handled; the last handler stops it. */
async function handle(qa: GatewayClient, count: number, max: number): Promise<Message[]> {
  const handled: Message[] = [];
  const controller = new AbortController();
  const errors: unknown[] = [];
  await qa.receive(
    async (m) => {
      handled.push(m);
      if (handled.length === count) controller.abort();
    },
    {
      waitS: 1,
      max,
      extendLeaseMs: false,
      signal: controller.signal,
      onError: (e) => errors.push(e),
    },
  );
  expect(errors).toEqual([]);
  return handled;
}

it('carries the ack of each last delivery on the next poll; stopped, it sends the last on its own', {
  timeout: 20_000,
}, async () => {
  const { adapter, proxy, qa } = await stack();
  const sent: { id: string; sender: string }[] = [];
  for (let i = 0; i < 5; i++) {
    sent.push({ id: await sendAs(adapter.url, 'pm', '@qa', 'status', { i }), sender: 'pm' });
  }
  // max 1: each poll takes one, so each carried ack is what releases the channel's next
  const handled = await handle(qa, 5, 1);
  expect(handled.map((m) => m.payload)).toEqual([0, 1, 2, 3, 4].map((i) => ({ i })));
  expect(await states(adapter.url, sent)).toEqual(Array(5).fill('acked'));
  // one channel, strict order: each carried ack hands over the next message in its answer;
  // the loop stopped in the last handler, so the last ack went on its own
  expect(proxy.deliveryCalls()).toEqual([
    'GET /v1/inbox',
    'POST /v1/inbox',
    'POST /v1/inbox',
    'POST /v1/inbox',
    'POST /v1/inbox',
    'POST /v1/acks',
  ]);
});

it("acks a batch's earlier deliveries at once and carries only the last's", {
  timeout: 20_000,
}, async () => {
  const { adapter, proxy, qa } = await stack();
  const sent: { id: string; sender: string }[] = [];
  // three channels of qa, two messages each; a poll takes a channel's ready messages together
  for (let round = 0; round < 2; round++) {
    sent.push({ id: await sendAs(adapter.url, 'pm', '@qa', 'status', { round }), sender: 'pm' });
    sent.push({
      id: await sendAs(adapter.url, 'pm', 'product', 'status', { round }),
      sender: 'pm',
    });
    sent.push({
      id: await sendAs(adapter.url, 'orchestrator', 'all-agents', 'status', { round }),
      sender: 'orchestrator',
    });
  }
  // max 3: the first poll takes @qa's two and product's first
  const handled = await handle(qa, 6, 3);
  expect(handled.map((m) => m.message_id).sort()).toEqual(sent.map((s) => s.id).sort());
  expect(await states(adapter.url, sent)).toEqual(Array(6).fill('acked'));
  expect(proxy.deliveryCalls()).toEqual([
    'GET /v1/inbox',
    'POST /v1/acks',
    'POST /v1/acks',
    'POST /v1/inbox', // carries the third's ack; its answer has the other three
    'POST /v1/acks',
    'POST /v1/acks',
    'POST /v1/acks', // the last, on its own: the loop was stopped
  ]);
});

it('after a 405 to a carrying poll it acks on its own, and never carries again', {
  timeout: 20_000,
}, async () => {
  const { adapter, proxy, qa } = await stack({ refuseCarry: true });
  const sent: { id: string; sender: string }[] = [];
  for (let i = 0; i < 3; i++) {
    sent.push({ id: await sendAs(adapter.url, 'pm', '@qa', 'status', { i }), sender: 'pm' });
  }
  const handled = await handle(qa, 3, 1);
  expect(handled.map((m) => m.payload)).toEqual([0, 1, 2].map((i) => ({ i })));
  expect(await states(adapter.url, sent)).toEqual(Array(3).fill('acked'));
  expect(proxy.deliveryCalls()).toEqual([
    'GET /v1/inbox',
    'POST /v1/inbox', // 405: the gateway does not take acks on the poll
    'POST /v1/acks',
    'GET /v1/inbox',
    'POST /v1/acks',
    'GET /v1/inbox',
    'POST /v1/acks',
  ]);
});
