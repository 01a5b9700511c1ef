/**
 * The sidecar's operations below its HTTP (src/sidecar/service.ts), called in-process as the
 * MCP tools will call them: a send through one agent's sidecar reaches another agent's inbox and
 * is acked there, with no HTTP between the caller and either service; with the adapter gone, a
 * send answers queued, as POST /v1/messages does.
 */
import { request } from 'node:http';
import { afterEach, expect, it } from 'vitest';
import type { Sidecar } from '../../src/sidecar/server.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { httpAnswer } from '../helpers/answer.js';
import { call, type Json, recordingProxy } from '../helpers/http.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function sidecarFor(agent: string, adapter: TestAdapter): Promise<Sidecar> {
  const t = await startTestSidecar(agent, adapter.url);
  stops.push(t.stop);
  return t.sidecar;
}

it('send, inbox and ack are operations of their own, answered as the HTTP API answers', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await sidecarFor('pm', adapter);
  const qa = await sidecarFor('qa', adapter);

  const sent = await httpAnswer('send', () =>
    pm.service.send({
      to: 'product',
      kind: 'task/request',
      payload: { task_id: 'T-1', description: 'below the HTTP' },
    }),
  );
  expect(sent.status).toBe(201);
  const ack = sent.body;
  expect(ack).toMatchObject({ status: 'delivered', channel: 'product', channel_sequence_id: 1 });
  expect(ack.idempotency_key).toMatch(/^[0-9a-f-]{36}$/); // made for the caller

  const inbox = await httpAnswer('inbox', () => qa.service.inbox({ wait: 5, max: 10 }));
  const { deliveries } = inbox.body;
  expect(deliveries).toHaveLength(1);
  expect(deliveries[0].message).toMatchObject({
    message_id: ack.message_id,
    sender: 'pm',
    payload: { task_id: 'T-1' },
  });
  const acked = await httpAnswer('ack', () =>
    qa.service.ack({ delivery_ids: [deliveries[0].delivery_id] }),
  );
  expect(acked.body).toEqual({
    acked: [deliveries[0].delivery_id],
    dead_lettered: [],
    unknown: [],
  });
  expect((await httpAnswer('inbox', () => qa.service.inbox({}))).body.deliveries).toEqual([]);

  // a bad envelope is refused by the operation itself, naming the field
  await expect(pm.service.send({ to: 'product', kind: 'task/request' })).rejects.toMatchObject({
    code: 'invalid_envelope',
    field: 'payload.task_id',
  });
});

it('sends that arrive together travel in few requests, each answered as if alone', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  // the sidecar's requests, counted on their way to the adapter
  const proxy = await recordingProxy(adapter.url);
  stops.push(proxy.close);
  const t = await startTestSidecar('qa', proxy.url);
  stops.push(t.stop);
  const qa = t.sidecar;
  const batches = () => proxy.seen.filter((r) => r === 'POST /v1/messages/batch').length;
  const before = batches();
  // 30 sends in one turn; the 8th to a channel qa is not a member of
  const answers = await Promise.all(
    Array.from({ length: 30 }, (_, n) =>
      httpAnswer('send', () =>
        qa.service.send({ to: n === 7 ? 'platform' : 'product', kind: 'status', payload: { n } }),
      ),
    ),
  );
  const requests = batches() - before;
  expect(requests).toBeGreaterThanOrEqual(1);
  expect(requests).toBeLessThanOrEqual(5); // not 30: two go at once, the rest wait together
  const bodies = answers.map((a) => a.body as Json);
  expect(answers[7]!.status).toBe(403);
  expect(bodies[7]).toMatchObject({ error: 'not_member', field: 'to' });
  const delivered = answers.filter((_, n) => n !== 7);
  expect(delivered.map((a) => a.status)).toEqual(Array(29).fill(201));
  const ok = bodies.filter((_, n) => n !== 7);
  for (const b of ok) {
    expect(b).toMatchObject({ status: 'delivered', channel: 'product', duplicate: false });
    expect(b).not.toHaveProperty('error');
  }
  const seqs = ok.map((b) => b.channel_sequence_id as number).sort((a, b) => a - b);
  expect(seqs).toEqual(Array.from({ length: 29 }, (_, i) => i + 1));
  // stored once each, in the channel, the refused one nowhere
  const page = await call(adapter.url, 'GET', '/v1/channels/product/messages?after=0&limit=100', {
    agent: 'qa',
  });
  const stored = (page.body as { messages: { payload: { n: number } }[] }).messages;
  expect(stored.map((m) => m.payload.n).sort((a, b) => a - b)).toEqual(
    Array.from({ length: 30 }, (_, n) => n).filter((n) => n !== 7),
  );
});

it('with the adapter gone, a send is queued and the status says so', async () => {
  const adapter = await startTestAdapter();
  const pm = await sidecarFor('pm', adapter);
  await adapter.stop();
  const send = (envelope: Json) => httpAnswer('send', () => pm.service.send(envelope));
  const answer = await send({ to: '@qa', kind: 'status', payload: { n: 1 } });
  expect(answer.status).toBe(202);
  expect(answer.body).toMatchObject({ status: 'queued', outbox_depth: 1 });
  expect(pm.service.status()).toMatchObject({ outbox: { depth: 1 }, ready: true });
  // while queued, the same key is the same message again, or a 409 for another one
  const key = '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11';
  const first = { idempotency_key: key, to: '@qa', kind: 'status', payload: { n: 2, m: 3 } };
  expect((await send(first)).status).toBe(202);
  const again = await send({ ...first, payload: { m: 3, n: 2 } }); // keys reordered
  expect([again.status, again.body]).toEqual([202, expect.objectContaining({ outbox_depth: 2 })]);
  const other = await send({ ...first, payload: { n: 99 } });
  expect([other.status, (other.body as Json).error]).toEqual([409, 'idempotency_conflict']);
  expect(pm.service.status()).toMatchObject({ outbox: { depth: 2 } });
});

it("passes the agent's lease extensions, rejections, status questions and whoami to the adapter", async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await sidecarFor('pm', adapter);
  const qa = await sidecarFor('qa', adapter);
  const sent = (
    await httpAnswer('send', () =>
      pm.service.send({ to: '@qa', kind: 'task/cancel', payload: { task_id: 'T-9' } }),
    )
  ).body;
  const [d] = (await httpAnswer('inbox', () => qa.service.inbox({ wait: 5, max: 1 }))).body
    .deliveries;
  const extended = await httpAnswer('extendLeases', () =>
    qa.service.extendLeases({ delivery_ids: [d.delivery_id], extend_ms: 120_000 }),
  );
  expect(extended.status).toBe(200);
  const lease = extended.body.leases[0];
  expect(lease.delivery_id).toBe(d.delivery_id);
  expect(Date.parse(lease.lease_expires_at)).toBeGreaterThan(Date.parse(d.lease_expires_at));

  const nacked = await httpAnswer('nack', () =>
    qa.service.nack({ delivery_ids: [d.delivery_id], retry: false, reason: 'no T-9' }),
  );
  expect(nacked.body).toMatchObject({ nacked: [d.delivery_id] });
  const question = { message_id: sent.message_id };
  const status = (await httpAnswer('messageStatus', () => pm.service.messageStatus(question))).body;
  expect(status.recipients).toEqual([
    { agent: 'qa', state: 'dead_letter', attempts: 1, reason: 'rejected', note: 'no T-9' },
  ]);
  // qa did not send it: the adapter refuses qa's question, and the sidecar passes that on
  const refused = await httpAnswer('messageStatus', () => qa.service.messageStatus(question));
  expect([refused.status, refused.body.error]).toEqual([403, 'not_your_message']);

  const me = (await httpAnswer('me', () => qa.service.me())).body;
  expect(me.agent).toBe('qa');
  expect(me.channels.map((c: { name: string }) => c.name).sort()).toEqual([
    'all-agents',
    'product',
  ]);
  expect(me.limits).toMatchObject({ max_batch: 100, max_depth: 64 });
});

/** A raw request to the sidecar, with the headers a browser or a rebound name would send. */
function raw(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body = '',
) {
  return new Promise<{ status: number; body: Json }>((resolve, reject) => {
    const req = request(url + path, { method, headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => {
        text += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

it('takes only what a local agent runtime sends: loopback Host, no Origin, JSON posts', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await sidecarFor('pm', adapter);
  const port = new URL(pm.url).port;
  const json = { 'content-type': 'application/json' };
  const send = JSON.stringify({ to: '@qa', kind: 'status', payload: {} });
  // the agent runtime's own requests pass, whichever loopback name it uses
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'LOCALHOST']) {
    const ok = await raw(pm.url, 'POST', '/v1/messages', { ...json, host }, send);
    expect(ok.status, host).toBe(201);
  }
  // a rebound name, a browser's Origin, a form post: refused, and nothing was sent for them
  const rebound = await raw(pm.url, 'GET', '/v1/inbox', { host: `evil.example:${port}` });
  expect([rebound.status, rebound.body.error]).toEqual([403, 'bad_host']);
  const browser = await raw(
    pm.url,
    'POST',
    '/v1/messages',
    {
      ...json,
      origin: 'http://evil.example',
    },
    send,
  );
  expect([browser.status, browser.body.error]).toEqual([403, 'cross_origin']);
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', '']) {
    const form = await raw(
      pm.url,
      'POST',
      '/v1/messages',
      type === '' ? {} : { 'content-type': type },
      send,
    );
    expect([form.status, form.body.error], type).toEqual([415, 'not_json']);
  }
  const emergency = await raw(pm.url, 'POST', '/v1/emergency', { origin: 'null', ...json }, '{}');
  expect(emergency.body.error).toBe('cross_origin');
  const qa = await call(adapter.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
  expect(qa.body.pending).toBe(4); // the four good sends, none of the refused ones
});

it('sends complete while 20 long polls are parked, and the breaker stays closed', {
  timeout: 60_000,
}, async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const qa = await sidecarFor('qa', adapter);
  // 20 polls of qa's, each waiting 25 s at the adapter (nothing is coming for qa): more than a
  // pool of connections holds, and far longer than a send's 10 s deadline
  const polls = Array.from({ length: 20 }, () => qa.service.inbox({ wait: 25, max: 1 }));
  await until(async () => {
    const m = await call(adapter.url, 'GET', '/metrics');
    return Number(/agw_commit_messages_count (\d+)/.exec(m.body)?.[1] ?? 0) > 0;
  }, "the adapter's first commit in its metrics");
  const sends = await Promise.all(
    Array.from({ length: 20 }, (_, n) =>
      httpAnswer('send', () => qa.service.send({ to: 'product', kind: 'status', payload: { n } })),
    ),
  );
  // every one delivered, none queued behind the polls for want of a connection
  expect(sends.map((s) => s.status)).toEqual(Array(20).fill(201));
  expect(qa.service.status()).toMatchObject({ breaker: { state: 'closed' } });
  // the adapter stops: the parked polls are answered (empty), the rest find it gone (their
  // handlers attached first: they may settle while the adapter is stopping)
  const settled = Promise.allSettled(polls);
  await adapter.stop();
  await settled;
});

it("keeps the agent's emergencies to one budget whatever the reason: past it 429, counted, not written", async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await sidecarFor('pm', adapter);
  const big = Object.fromEntries(
    Array.from({ length: 50 }, (_, i) => [`f${i}`, 'x'.repeat(10_000)]),
  );
  const answers: { status: number; retryAfterS?: number; code?: string }[] = [];
  for (let i = 0; i < 200; i++) {
    try {
      pm.service.emergency({ reason: `reason_${i}`, message: 'help', fields: big });
      answers.push({ status: 202 });
    } catch (err) {
      const e = err as { status: number; code: string; retryAfterS?: number };
      answers.push({ status: e.status, code: e.code, retryAfterS: e.retryAfterS });
    }
  }
  expect(answers.filter((a) => a.status === 202)).toHaveLength(20); // the burst
  const refused = answers.filter((a) => a.status !== 202);
  expect(refused).toHaveLength(180);
  expect(refused.every((a) => a.status === 429 && a.code === 'rate_limited')).toBe(true);
  expect(refused.every((a) => (a.retryAfterS ?? 0) > 0)).toBe(true);
});

it('passes a budget refusal (422) back to the agent and never queues it', async () => {
  const adapter = await startTestAdapter({ threadBudget: '1' });
  stops.push(adapter.stop);
  const pm = await sidecarFor('pm', adapter);
  const send = (envelope: Json) => httpAnswer('send', () => pm.service.send(envelope));
  const root = (await send({ to: '@qa', kind: 'status' })).body;
  expect(root).toMatchObject({ status: 'delivered', thread_id: root.message_id, hop: 0 });
  // the thread holds its root: any reply of an agent passes AGW_THREAD_BUDGET=1
  const refused = await send({ to: '@qa', kind: 'status', reply_to: root.message_id });
  expect(refused.status).toBe(422);
  expect(refused.body).toMatchObject({ error: 'thread_budget_exceeded' });
  expect(pm.service.status()).toMatchObject({ outbox: { depth: 0, dead_letters: 0 } });
});
