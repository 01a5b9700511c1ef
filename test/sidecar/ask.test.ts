/**
 * POST /v1/ask at the sidecar (CONTRACT.md, "Asking and waiting for the answer"; docs/design/
 * time.md, "Asking"): a real adapter and real sidecars on loopback. The ask answers `replied`
 * with the reply, leased to the agent and kept from its inbox polls, whose ack works as any; or
 * `timeout` with the recipients' journey summary; the same key asked again sends nothing new;
 * a reply an inbox poll brings while an ask waits goes to the ask; and a reply handed to an ask
 * is never handed over again by inbox repair, a gap scan included. On both stores.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, recordingProxy, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { until, untilParked } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

let engine: 'sqlite' | 'postgresql' = 'sqlite';

async function adapter(): Promise<TestAdapter> {
  const db: Record<string, string> = {};
  if (engine === 'postgresql') {
    const pg = await testDatabase();
    stops.push(pg.drop);
    db.db = pg.url;
  }
  const t = await startTestAdapter(db);
  stops.push(t.stop);
  return t;
}

async function sidecar(agent: string, adapterUrl: string): Promise<string> {
  const s = await startTestSidecar(agent, adapterUrl);
  stops.push(s.stop);
  return s.url;
}

const ask = (url: string, body: object) => call(url, 'POST', '/v1/ask', { body });

/** An answer to `id` from `agent`, sent at the adapter; its message_id. */
async function answer(t: TestAdapter, agent: string, to: string, id: string): Promise<string> {
  const r = await call(t.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind: 'status', reply_to: id, payload: {} },
  });
  expect(r.status).toBe(201);
  return r.body.message_id as string;
}

/** The adapter's count of `agent`'s reply waits parked now (agw_agent_parked_reply_waits). */
async function parkedReplyWaits(t: TestAdapter, agent: string): Promise<number> {
  const text = (await call(t.url, 'GET', '/metrics')).body as string;
  const m = new RegExp(`^agw_agent_parked_reply_waits\\{agent="${agent}"\\} (\\d+)$`, 'm').exec(
    text,
  );
  return m === null ? 0 : Number(m[1]);
}

/** The messages of `channel` at the adapter, as `agent` replays them. */
async function channel(t: TestAdapter, agent: string, name: string): Promise<Json[]> {
  const r = await call(t.url, 'GET', `/v1/channels/${encodeURIComponent(name)}/messages`, {
    agent,
  });
  expect(r.status).toBe(200);
  return r.body.messages as Json[];
}

const ids = (ds: Json[]) => ds.map((d) => d.message.message_id);

describe.each(['sqlite', 'postgresql'] as const)('on %s', (store) => {
  beforeEach(() => {
    engine = store;
  });

  it("answers replied with the reply, leased to the agent and kept from its parked poll; the agent's ack of it is as any", {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    const pm = await sidecar('pm', t.url);
    const qa = await sidecar('qa', t.url);
    const task = { task_id: 'T-1', description: 'answer me' };
    const asking = ask(pm, { to: '@qa', kind: 'task/request', payload: task, timeout_ms: 30_000 });
    const polling = call(pm, 'GET', '/v1/inbox?wait=25');
    await until(async () => (await parkedReplyWaits(t, 'pm')) === 1, "pm's ask waiting");
    await untilParked(t.url, 'pm');
    const [question] = (await call(qa, 'GET', '/v1/inbox?wait=10')).body.deliveries;
    expect(question.message.payload).toEqual(task);
    const sent = await call(qa, 'POST', '/v1/messages', {
      body: {
        to: '@pm',
        kind: 'task/result',
        reply_to: question.message.message_id,
        payload: { task_id: 'T-1', status: 'success' },
      },
    });
    expect(sent.status).toBe(201);
    const asked = await asking;
    expect(asked.status).toBe(200);
    expect(asked.body).toMatchObject({
      status: 'replied',
      message: {
        status: 'delivered',
        message_id: question.message.message_id,
        channel: '@qa',
        duplicate: false,
      },
      reply: {
        attempt: 1,
        state: 'leased',
        lease_expires_at: expect.any(String),
        message: { message_id: sent.body.message_id, sender: 'qa', kind: 'task/result' },
      },
    });
    // the poll parked meanwhile hands over what came after, never the reply (in another channel:
    // @pm's next waits behind the reply, leased to pm, as behind any delivery)
    const later = await sendAs(t.url, 'engineering', 'product');
    const polled = await polling;
    expect(ids(polled.body.deliveries)).toEqual([later]);
    const { reply } = asked.body;
    const acked = await call(pm, 'POST', '/v1/acks', {
      body: { delivery_ids: [reply.delivery_id, polled.body.deliveries[0].delivery_id] },
    });
    expect(acked.body).toEqual({
      acked: [reply.delivery_id, polled.body.deliveries[0].delivery_id],
      dead_lettered: [],
      unknown: [],
    });
    const status = await call(qa, 'GET', `/v1/messages/${sent.body.message_id}`);
    expect(status.body.recipients).toEqual([
      expect.objectContaining({ agent: 'pm', state: 'acked', attempts: 1 }),
    ]);
    expect((await call(pm, 'GET', '/v1/inbox')).body.deliveries).toEqual([]);
  });

  it('answers timeout, no error, with where the message is for each recipient', {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    const pm = await sidecar('pm', t.url);
    const r = await ask(pm, { to: 'product', kind: 'status', timeout_ms: 1000 });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'timeout', message: { status: 'delivered' } });
    const recipients = r.body.recipients as Json[];
    expect(recipients.map((x) => x.agent).sort()).toEqual([
      'engineering',
      'growth',
      'qa',
      'research',
    ]);
    for (const x of recipients) {
      expect(x).toEqual({
        agent: x.agent,
        state: 'pending',
        cause: 'waiting_for_poll',
        explanation: expect.stringContaining(x.agent),
      });
    }
    // refusals name their field: the ask's own, and the envelope's as a send's
    for (const [body, field] of [
      [{ to: '@qa', kind: 'status', timeout_ms: 0 }, 'timeout_ms'],
      [{ to: '@qa', kind: 'status', timeout_ms: 900_001 }, 'timeout_ms'],
      [{ to: '@qa', kind: 'status', timeout_ms: '5' }, 'timeout_ms'],
      [{ kind: 'status' }, 'to'],
    ] as const) {
      const refused = await ask(pm, body);
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(refused.body.field).toBe(field);
    }
  });

  it('sends nothing new when the same key is asked again, and waits for the same reply', {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    const pm = await sidecar('pm', t.url);
    const key = randomUUID();
    const body = { idempotency_key: key, to: '@qa', kind: 'status', payload: { q: 1 } };
    const first = await ask(pm, { ...body, timeout_ms: 1000 });
    expect(first.body).toMatchObject({ status: 'timeout', message: { duplicate: false } });
    const id = first.body.message.message_id as string;
    // another timeout is the same ask: timeout_ms is not part of the message
    const second = await ask(pm, { ...body, timeout_ms: 1500 });
    expect(second.body).toMatchObject({
      status: 'timeout',
      message: { message_id: id, duplicate: true },
    });
    await answer(t, 'qa', '@pm', id);
    const third = await ask(pm, { ...body, timeout_ms: 20_000 });
    expect(third.body).toMatchObject({
      status: 'replied',
      message: { message_id: id, duplicate: true },
      reply: { state: 'leased', message: { reply_to: id } },
    });
    expect((await channel(t, 'qa', '@qa')).map((m) => m.idempotency_key)).toEqual([key]);
    // the same key with another message is a conflict, as for a send
    const other = await ask(pm, { ...body, payload: { q: 2 }, timeout_ms: 1000 });
    expect(other).toMatchObject({ status: 409, body: { error: 'idempotency_conflict' } });
  });

  it('hands a reply that an inbox poll brings to the ask waiting for it, not to the poll', {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    // the ask's wait at the adapter never answers here: the reply can only come by the poll
    const held: ServerResponse[] = [];
    const proxy = await recordingProxy(t.url, (req: IncomingMessage, res: ServerResponse) => {
      if (!/\/reply\?/.test(req.url ?? '')) return false;
      held.push(res);
      return true;
    });
    stops.push(proxy.close);
    const pm = await sidecar('pm', proxy.url);
    const asking = ask(pm, { to: '@qa', kind: 'status', timeout_ms: 30_000 });
    await until(() => held.length === 1, "the ask's wait held at the proxy");
    const polling = call(pm, 'GET', '/v1/inbox?wait=25');
    await untilParked(t.url, 'pm');
    const [question] = await pollAs(t.url, 'qa');
    const answered = await answer(t, 'qa', '@pm', question.message.message_id);
    const asked = await asking;
    expect(asked.body).toMatchObject({
      status: 'replied',
      reply: { state: 'leased', attempt: 1, message: { message_id: answered } },
    });
    expect((await polling).body.deliveries).toEqual([]);
    // the wait the ask gave up is closed, not left hanging
    await until(() => held[0]!.destroyed, "the ask's wait given up");
    const acked = await call(pm, 'POST', '/v1/acks', {
      body: { delivery_ids: [asked.body.reply.delivery_id] },
    });
    expect(acked.body.acked).toEqual([asked.body.reply.delivery_id]);
    expect((await call(pm, 'GET', '/v1/inbox')).body.deliveries).toEqual([]);
  });

  it('never hands over again a reply handed to an ask, when a gap scan passes it', {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    const pm = await sidecar('pm', t.url);
    const ack = (url: string, delivery_ids: number[], agent?: string) =>
      call(url, 'POST', '/v1/acks', { body: { delivery_ids }, ...(agent ? { agent } : {}) });
    // @pm's first message, handed over by the sidecar: its mark is 1
    await sendAs(t.url, 'engineering', '@pm');
    const [first] = (await call(pm, 'GET', '/v1/inbox')).body.deliveries;
    await ack(pm, [first.delivery_id]);
    // the second taken behind the sidecar's back, with pm's token: a gap the sidecar will scan
    const behind = await sendAs(t.url, 'engineering', '@pm');
    const [b] = await pollAs(t.url, 'pm');
    await ack(t.url, [b.delivery_id], 'pm');
    // the third is the reply an ask takes; acked at the adapter too, so that only the sidecar's
    // memory of the ask keeps it from being copied back by the scan
    const asking = ask(pm, { to: '@qa', kind: 'status', timeout_ms: 30_000 });
    await until(async () => (await parkedReplyWaits(t, 'pm')) === 1, "pm's ask waiting");
    const [question] = await pollAs(t.url, 'qa');
    const answered = await answer(t, 'qa', '@pm', question.message.message_id);
    const asked = await asking;
    expect(asked.body.reply.message).toMatchObject({
      message_id: answered,
      channel_sequence_id: 3,
    });
    await ack(t.url, [asked.body.reply.delivery_id], 'pm');
    // the fourth opens the gap after 1: the scan hands the second over (acked elsewhere: a copy
    // of the sidecar's own), skips the reply, then the fourth
    const fourth = await sendAs(t.url, 'engineering', '@pm');
    const polled = (await call(pm, 'GET', '/v1/inbox?wait=5')).body.deliveries as Json[];
    expect(ids(polled)).toEqual([behind, fourth]);
    expect(polled[0].delivery_id).toBeLessThan(0);
    await ack(
      pm,
      polled.map((d) => d.delivery_id),
    );
    expect((await call(pm, 'GET', '/v1/inbox?wait=1')).body.deliveries).toEqual([]);
  });

  it('waits for a send kept in the outbox until the drain sends it, then for its reply', {
    timeout: 60_000,
  }, async () => {
    const t = await adapter();
    // the adapter takes no message while `down`: the sidecar keeps them in its outbox
    let down = true;
    const proxy = await recordingProxy(t.url, (req: IncomingMessage, res: ServerResponse) => {
      if (!down || !(req.url ?? '').startsWith('/v1/messages')) return false;
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
      res.end('{"error":"overloaded","message":"the adapter is down for this test"}');
      return true;
    });
    stops.push(proxy.close);
    const pm = await sidecar('pm', proxy.url);
    const key = randomUUID();
    const queued = await ask(pm, {
      idempotency_key: key,
      to: '@qa',
      kind: 'status',
      timeout_ms: 1000,
    });
    expect(queued.body).toEqual({
      status: 'timeout',
      message: { status: 'queued', idempotency_key: key, outbox_depth: 1 },
      recipients: [],
    });
    // the wait again, by its key: through the drain, then for the reply
    const waiting = call(pm, 'GET', `/v1/asks/${key}?timeout_ms=30000`);
    down = false;
    const [question] = await pollAs(t.url, 'qa', { wait: 20 });
    expect(question.message.idempotency_key).toBe(key);
    const answered = await answer(t, 'qa', '@pm', question.message.message_id);
    const asked = await waiting;
    expect(asked.body).toMatchObject({
      status: 'replied',
      message: { status: 'delivered', message_id: question.message.message_id },
      reply: { state: 'leased', message: { message_id: answered } },
    });
    // an unknown message is not one to wait for
    const unknown = await call(pm, 'GET', `/v1/asks/${randomUUID()}?timeout_ms=1000`);
    expect(unknown).toMatchObject({ status: 404, body: { error: 'not_found' } });
  });

  it('hands a reply the agent never acked over again once its lease ended, as any delivery', {
    timeout: 60_000,
  }, async () => {
    const t = await startTestAdapter({ leaseMs: '1000', retryBaseMs: '10' });
    stops.push(t.stop);
    const pm = await sidecar('pm', t.url);
    const asking = ask(pm, { to: '@qa', kind: 'status', timeout_ms: 30_000 });
    await until(async () => (await parkedReplyWaits(t, 'pm')) === 1, "pm's ask waiting");
    const [question] = await pollAs(t.url, 'qa');
    const answered = await answer(t, 'qa', '@pm', question.message.message_id);
    const asked = await asking;
    expect(asked.body.reply).toMatchObject({ attempt: 1, message: { message_id: answered } });
    // at least once: the ask's lease ends unacked, and the next poll has it
    const again = (await call(pm, 'GET', '/v1/inbox?wait=20')).body.deliveries as Json[];
    expect(again).toMatchObject([
      { delivery_id: asked.body.reply.delivery_id, attempt: 2, message: { message_id: answered } },
    ]);
  });
});
