import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (agent: string, to: string, kind: string, payload: object) =>
  sendAs(t!.url, agent, to, kind, payload);
const poll = (agent: string, o: { wait?: number; max?: number } = {}) => pollAs(t!.url, agent, o);
const nack = (agent: string, body: object) => call(t!.url, 'POST', '/v1/nacks', { agent, body });
const deadLetters = () =>
  call(t!.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' }).then((r) => {
    expect(r.status).toBe(200);
    return r.body.dead_letters as Json[];
  });

describe('nack with retry false', { timeout: 30_000 }, () => {
  it('dead-letters at once as rejected with the note, alerts orchestrator, and the next message of the channel follows at once', async () => {
    t = await startTestAdapter({ retryBaseMs: '10' });
    const poison = await send('pm', '@engineering', 'task/request', {
      task_id: 'X',
      description: 'start task X in a repository that does not exist',
    });
    const next = await send('pm', '@engineering', 'task/request', {
      task_id: 'Y',
      description: 'start task Y',
    });
    const [d] = await poll('engineering', { max: 1 });
    expect(d.message.message_id).toBe(poison);

    const reason = 'repository "nowhere" does not exist; retrying cannot help';
    const r = await nack('engineering', { delivery_ids: [d.delivery_id], retry: false, reason });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ nacked: [d.delivery_id], ignored: [], unknown: [] });

    // the dead letter, with the agent's reason as its note, after one attempt
    const dead = await deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({
      reason: 'rejected',
      note: reason,
      attempts: 1,
      recipient: 'engineering',
      replay_delivery_id: null,
      message: { message_id: poison },
    });

    // orchestrator is told: its long poll answers with the alert
    const alerts = await poll('orchestrator', { wait: 10 });
    expect(alerts.map((a) => a.message)).toMatchObject([
      {
        sender: 'adapter',
        channel: '@orchestrator',
        kind: 'alert/dead-letter',
        priority: 'critical',
        payload: {
          reason: 'rejected',
          recipient: 'engineering',
          count: 1,
          message_ids: [poison],
          attempts: 1,
        },
      },
    ]);

    // the channel is released: the next message at once, a first attempt
    const after = await poll('engineering');
    expect(after.map((x) => [x.message.message_id, x.attempt])).toEqual([[next, 1]]);
    await call(t.url, 'POST', '/v1/acks', {
      agent: 'engineering',
      body: { delivery_ids: [after[0].delivery_id] },
    });
    // and the poison never comes back: a second spans a hundred retry backoffs (~10 ms)
    expect(await poll('engineering', { wait: 1 })).toEqual([]);
    expect(await deadLetters()).toHaveLength(1);
  });

  it('without a reason the dead letter is rejected with a null note', async () => {
    t = await startTestAdapter();
    const m = await send('pm', '@qa', 'status', {});
    const [d] = await poll('qa');
    expect((await nack('qa', { delivery_ids: [d.delivery_id], retry: false })).status).toBe(200);
    const dead = await deadLetters();
    expect(dead.map((x) => [x.reason, x.note, x.message.message_id])).toEqual([
      ['rejected', null, m],
    ]);
  });

  it('a delivery not leased is ignored and not dead-lettered; retry defaults to true', async () => {
    t = await startTestAdapter({ retryBaseMs: '10' });
    await send('pm', '@qa', 'status', {});
    const [d] = await poll('qa');
    await call(t.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [d.delivery_id] } });
    const r = await nack('qa', { delivery_ids: [d.delivery_id, 424_242], retry: false });
    expect(r.body).toEqual({ nacked: [], ignored: [d.delivery_id], unknown: [424_242] });
    expect(await deadLetters()).toEqual([]);

    // a plain nack is a failed attempt, retried, not a dead letter
    await send('pm', '@qa', 'status', {});
    const [e] = await poll('qa');
    expect((await nack('qa', { delivery_ids: [e.delivery_id] })).body.nacked).toEqual([
      e.delivery_id,
    ]);
    const again = await poll('qa', { wait: 10 });
    expect(again.map((x) => [x.delivery_id, x.attempt])).toEqual([[e.delivery_id, 2]]);
    expect(await deadLetters()).toEqual([]);
  });

  it("rejecting another agent's delivery answers it as unknown, and dead-letters only the caller's", async () => {
    t = await startTestAdapter();
    await send('pm', '@qa', 'status', {});
    await send('pm', '@growth', 'status', {});
    const [q] = await poll('qa');
    const [g] = await poll('growth');
    const r = await nack('qa', { delivery_ids: [q.delivery_id, g.delivery_id], retry: false });
    expect(r.status).toBe(200);
    // growth's id is answered as an id that names no delivery (L8)
    expect(r.body).toEqual({ nacked: [q.delivery_id], ignored: [], unknown: [g.delivery_id] });
    expect((await deadLetters()).map((d: Json) => d.recipient)).toEqual(['qa']);
    // growth's delivery is still leased to growth: growth acks it
    const acked = await call(t.url, 'POST', '/v1/acks', {
      agent: 'growth',
      body: { delivery_ids: [g.delivery_id] },
    });
    expect(acked.body.acked).toEqual([g.delivery_id]);
  });

  it('a malformed nack is 400 invalid_request naming the field', async () => {
    t = await startTestAdapter();
    await send('pm', '@qa', 'status', {});
    const [d] = await poll('qa');
    const cases: [object, string][] = [
      [{ delivery_ids: [d.delivery_id], retry: 'no' }, 'retry'],
      [{ delivery_ids: [d.delivery_id], retry: false, reason: 42 }, 'reason'],
      [{ delivery_ids: [d.delivery_id], retry: false, reason: 'x'.repeat(1001) }, 'reason'],
      [{ delivery_ids: [d.delivery_id], retry: false, why: 'typo' }, 'why'],
    ];
    for (const [body, field] of cases) {
      const r = await nack('qa', body);
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ error: 'invalid_request', field });
    }
    // none of them touched the delivery
    expect(await deadLetters()).toEqual([]);
    const ok = await nack('qa', {
      delivery_ids: [d.delivery_id],
      retry: false,
      reason: 'x'.repeat(1000),
    });
    expect(ok.body.nacked).toEqual([d.delivery_id]);
    expect((await deadLetters())[0].note).toHaveLength(1000);
  });
});
