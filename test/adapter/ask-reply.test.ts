/**
 * GET /v1/messages/{id}/reply (docs/reference/adapter-api.md; docs/design/time.md, "Asking"): the
 * wait an ask makes at the adapter. It parks as an inbox poll does and is woken by the commit
 * that stores the reply; it takes a pending reply ahead of its channel's order, renews a leased
 * one, answers an acked one as it is, and is the sender's alone. On both stores.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** The clock the adapter reads: tests move it. */
let now = Date.UTC(2031, 0, 1);

const STORES = {
  SQLite: (o: Record<string, string>) => startTestAdapter(o, { now: () => now }),
  PostgreSQL: async (o: Record<string, string>) => {
    const db = await testDatabase();
    stops.push(() => db.drop());
    return startTestAdapter({ ...o, db: db.url }, { now: () => now });
  },
};

async function start(store: keyof typeof STORES, o: Record<string, string> = {}) {
  const t = await STORES[store]({ leaseMs: '30000', ...o });
  stops.push(t.stop);
  return t;
}

const reply = (t: TestAdapter, agent: string, id: string, wait = 0) =>
  call(t.url, 'GET', `/v1/messages/${id}/reply?wait=${wait}`, { agent });

/** An answer to `id`, from `agent` to `to`; its message_id. */
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

describe.each(Object.keys(STORES) as (keyof typeof STORES)[])('on %s', (store) => {
  it('parks until the reply is committed, and takes it in that commit, ahead of its lane', {
    timeout: 60_000,
  }, async () => {
    const t = await start(store);
    const asked = await sendAs(t.url, 'pm', '@qa');
    const earlier = await sendAs(t.url, 'research', '@pm');
    const waiting = reply(t, 'pm', asked, 25);
    await until(async () => (await parkedReplyWaits(t, 'pm')) === 1, 'the reply wait parked');
    const answered = await answer(t, 'qa', '@pm', asked);
    const got = await waiting;
    expect(got.status).toBe(200);
    expect(got.body.delivery).toMatchObject({
      attempt: 1,
      state: 'leased',
      lease_expires_at: new Date(now + 30_000).toISOString(),
      message: { message_id: answered, reply_to: asked, sender: 'qa', channel_sequence_id: 2 },
    });
    expect(await parkedReplyWaits(t, 'pm')).toBe(0);
    // research's message, before it in @pm, is still pm's to poll; the reply is not handed again
    expect((await pollAs(t.url, 'pm')).map((d: Json) => d.message.message_id)).toEqual([earlier]);
    const journey = await call(t.url, 'GET', `/v1/messages/${answered}/journey`, { agent: 'qa' });
    expect(journey.body.recipients[0]).toMatchObject({ agent: 'pm', cause: 'leased' });
  });

  it('renews a reply already leased to the asker, and answers an acked one as it is', {
    timeout: 60_000,
  }, async () => {
    const t = await start(store);
    const asked = await sendAs(t.url, 'pm', '@qa');
    const answered = await answer(t, 'qa', '@pm', asked);
    const [polled] = await pollAs(t.url, 'pm');
    expect(polled.message.message_id).toBe(answered);
    now += 10_000;
    const renewed = await reply(t, 'pm', asked);
    expect(renewed.body.delivery).toMatchObject({
      delivery_id: polled.delivery_id,
      attempt: 1,
      state: 'leased',
      lease_expires_at: new Date(now + 30_000).toISOString(),
    });
    const acked = await call(t.url, 'POST', '/v1/acks', {
      agent: 'pm',
      body: { delivery_ids: [polled.delivery_id] },
    });
    expect(acked.body.acked).toEqual([polled.delivery_id]);
    const settled = await reply(t, 'pm', asked);
    expect(settled.body.delivery).toMatchObject({
      delivery_id: polled.delivery_id,
      state: 'acked',
      lease_expires_at: null,
      message: { message_id: answered },
    });
    const events = await call(t.url, 'GET', `/v1/messages/${answered}/journey`, { agent: 'qa' });
    expect(events.body.recipients[0].events.map((e: Json) => e.event)).toEqual([
      'queued',
      'leased',
      'lease_extended',
      'acked',
    ]);
  });

  it('answers null when none came, and 404 for a message the caller did not send', {
    timeout: 60_000,
  }, async () => {
    const t = await start(store);
    const asked = await sendAs(t.url, 'pm', '@qa');
    expect(await reply(t, 'pm', asked)).toMatchObject({ status: 200, body: { delivery: null } });
    // qa received it, but did not send it: nothing of pm's is qa's to take
    await answer(t, 'qa', '@pm', asked);
    const theirs = await reply(t, 'qa', asked);
    expect(theirs).toMatchObject({ status: 404, body: { error: 'not_found' } });
    expect(await reply(t, 'pm', randomUUID())).toMatchObject({ status: 404 });
    expect(await reply(t, 'pm', asked, 26)).toMatchObject({
      status: 400,
      body: { error: 'invalid_request' },
    });
    // an operator has no inbox to take a reply into
    const operator = await call(t.url, 'GET', `/v1/messages/${asked}/reply`, {
      agent: 'operator:alice',
    });
    expect(operator).toMatchObject({ status: 403, body: { error: 'not_an_agent' } });
  });
});
