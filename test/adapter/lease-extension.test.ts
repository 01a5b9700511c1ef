import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (agent: string, to: string) => sendAs(t!.url, agent, to);
const poll = (agent: string, o: { wait?: number; max?: number } = {}) => pollAs(t!.url, agent, o);
const extend = (agent: string, body: object) => call(t!.url, 'POST', '/v1/leases', { agent, body });
const status = (messageId: string) =>
  call(t!.url, 'GET', `/v1/messages/${messageId}`, { agent: 'pm' }).then((r) => {
    expect(r.status).toBe(200);
    return r.body.recipients as Json[];
  });

describe('POST /v1/leases', { timeout: 60_000 }, () => {
  it('a lease extended past its first expiry is not handed over again, while one not extended is', async () => {
    t = await startTestAdapter({ leaseMs: '1000', retryBaseMs: '10' });
    const kept = await send('pm', '@qa');
    const dropped = await send('pm', 'product');
    const leased = await poll('qa');
    expect(leased.map((d) => d.message.message_id)).toEqual([kept, dropped]);
    const [k, d] = leased;
    // both leased in the same poll: the same first expiry
    expect(k.lease_expires_at).toBe(d.lease_expires_at);

    const before = Date.now();
    const r = await extend('qa', { delivery_ids: [k.delivery_id], extend_ms: 20_000 });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      leases: [{ delivery_id: k.delivery_id, lease_expires_at: expect.any(String) }],
    });
    const until = Date.parse(r.body.leases[0].lease_expires_at);
    expect(until).toBeGreaterThanOrEqual(before + 20_000);
    expect(until).toBeLessThanOrEqual(Date.now() + 20_000);

    // the one not extended comes back once the first expiry has passed ...
    const back = await poll('qa', { wait: 10 });
    expect(back.map((x) => [x.message.message_id, x.attempt])).toEqual([[dropped, 2]]);
    await call(t.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [back[0].delivery_id] },
    });
    // ... the extended one does not, over three more seconds: three times the first lease
    expect(await poll('qa', { wait: 3 })).toEqual([]);
    expect(await status(kept)).toEqual([
      { agent: 'qa', state: 'leased', attempts: 1, reason: null },
    ]);
    // and it can still be acked under its extended lease
    const ack = await call(t.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [k.delivery_id] },
    });
    expect(ack.body.acked).toEqual([k.delivery_id]);
    expect((await status(kept))[0].state).toBe('acked');
  });

  it('an extension may ask for AGW_MAX_LEASE_MS and no more: past it 400 invalid_request naming extend_ms', async () => {
    t = await startTestAdapter({ maxLeaseMs: '5000', leaseMs: '1000' });
    await send('pm', '@qa');
    const [d] = await poll('qa');
    const over = await extend('qa', { delivery_ids: [d.delivery_id], extend_ms: 5001 });
    expect(over.status).toBe(400);
    expect(over.body).toMatchObject({ error: 'invalid_request', field: 'extend_ms' });
    expect(over.body.message).toContain('extend_ms');
    expect(over.body.message).toContain('5000');
    for (const bad of [0, -1, 1.5, '100']) {
      const r = await extend('qa', { delivery_ids: [d.delivery_id], extend_ms: bad });
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ error: 'invalid_request', field: 'extend_ms' });
    }
    const missing = await extend('qa', { delivery_ids: [d.delivery_id] });
    expect(missing.body).toMatchObject({ error: 'invalid_request', field: 'extend_ms' });
    const most = await extend('qa', { delivery_ids: [d.delivery_id], extend_ms: 5000 });
    expect(most.status).toBe(200);
    expect(most.body.leases).toHaveLength(1);
  });

  it("extending another agent's delivery is 409 not_leased, as for an unknown id, and leaves it be", async () => {
    t = await startTestAdapter();
    const sent = await send('pm', '@qa');
    const [d] = await poll('qa');
    const r = await extend('growth', { delivery_ids: [d.delivery_id], extend_ms: 60_000 });
    const unknown = await extend('growth', { delivery_ids: [987_654], extend_ms: 60_000 });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ error: 'not_leased', field: 'delivery_ids' });
    // the same sentence but for the id: nothing tells growth that qa holds this one (L8)
    expect(r.body.message.replace(String(d.delivery_id), 'N')).toBe(
      unknown.body.message.replace('987654', 'N'),
    );
    // qa's lease is as it was
    expect(await status(sent)).toEqual([
      expect.objectContaining({ agent: 'qa', state: 'leased', attempts: 1 }),
    ]);
    const own = await extend('qa', { delivery_ids: [d.delivery_id], extend_ms: 60_000 });
    expect(own.body.leases[0].lease_expires_at).not.toBe(d.lease_expires_at);
  });

  it('extending a delivery no longer leased (acked, or unknown) is 409 not_leased', async () => {
    t = await startTestAdapter();
    await send('pm', '@qa');
    const [d] = await poll('qa');
    await call(t.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [d.delivery_id] } });
    const acked = await extend('qa', { delivery_ids: [d.delivery_id], extend_ms: 60_000 });
    expect(acked.status).toBe(409);
    expect(acked.body).toMatchObject({ error: 'not_leased', field: 'delivery_ids' });
    expect(acked.body.message).toContain(String(d.delivery_id));
    const unknown = await extend('qa', { delivery_ids: [999_999], extend_ms: 60_000 });
    expect(unknown.status).toBe(409);
    expect(unknown.body.error).toBe('not_leased');
  });

  it('a request naming one delivery no longer leased extends none of them', async () => {
    t = await startTestAdapter({ leaseMs: '1000', retryBaseMs: '10' });
    const first = await send('pm', '@qa');
    const second = await send('pm', 'product');
    const [a, b] = await poll('qa');
    expect([a.message.message_id, b.message.message_id]).toEqual([first, second]);
    await call(t.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [a.delivery_id] } });
    const r = await extend('qa', {
      delivery_ids: [b.delivery_id, a.delivery_id],
      extend_ms: 60_000,
    });
    expect(r.status).toBe(409);
    // b kept its first lease: it runs out and b comes back, well before the 60 s asked for
    const back = await poll('qa', { wait: 10 });
    expect(back.map((x) => [x.delivery_id, x.attempt])).toEqual([[b.delivery_id, 2]]);
  });
});
