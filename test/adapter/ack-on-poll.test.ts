/**
 * Acks carried on the next poll (POST /v1/inbox): the ack and the poll's first lease go into
 * one group commit, so an ack that settles a channel's leased message hands over the channel's
 * next one in the same answer. Black-box over HTTP with a real SQLite store; the store is
 * wrapped only to see which operations each commit held.
 */
import { setImmediate as turn } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { Store, StoreOp } from '../../src/store/store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

/** The operations of each commit, in order, and a way to wait for one with given operations. */
function commitLog() {
  const groups: string[][] = [];
  const waiting: { want: string[]; resolve: () => void }[] = [];
  const wrap = (store: Store): Store =>
    new Proxy(store, {
      get(target, key) {
        if (key === 'commit') {
          return async (ops: readonly StoreOp[]) => {
            const committed = await target.commit(ops);
            const kinds = ops.map((o) => o.op);
            groups.push(kinds);
            for (const w of waiting.splice(0)) {
              if (JSON.stringify(w.want) === JSON.stringify(kinds)) w.resolve();
              else waiting.push(w);
            }
            return committed;
          };
        }
        const v = Reflect.get(target, key, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
  /** Resolves once a commit of exactly these operations has returned (not before it ran). */
  const next = (want: string[]) => new Promise<void>((resolve) => waiting.push({ want, resolve }));
  return { groups, wrap, next };
}

/** Group commits so far, from /metrics (agw_commit_messages is observed once per commit). */
async function commits(url: string): Promise<number> {
  const text = String((await call(url, 'GET', '/metrics')).body);
  const count = /^agw_commit_messages_count (\d+)$/m.exec(text);
  if (count === null) throw new Error(`no agw_commit_messages_count in /metrics:\n${text}`);
  return Number(count[1]);
}

const carry = (agent: string, ids: unknown, query = '?wait=0&max=10') =>
  call(t!.url, 'POST', `/v1/inbox${query}`, { agent, body: { delivery_ids: ids } });

/** Each recipient's delivery state of a message, asked as its sender. */
async function stateOf(messageId: string, sender = 'pm'): Promise<Record<string, string>> {
  const r = await call(t!.url, 'GET', `/v1/messages/${messageId}`, { agent: sender });
  expect(r.status).toBe(200);
  return Object.fromEntries((r.body.recipients as Json[]).map((x) => [x.agent, x.state]));
}

describe('POST /v1/inbox: acks carried on the poll', { timeout: 20_000 }, () => {
  it('acks the leased message and hands over its channel successor in the same answer, in one commit', async () => {
    const log = commitLog();
    t = await startTestAdapter({}, { wrapStore: log.wrap });
    const first = await sendAs(t.url, 'pm', '@qa', 'status', { n: 1 });
    const second = await sendAs(t.url, 'pm', '@qa', 'status', { n: 2 });

    const got = await pollAs(t.url, 'qa', { max: 1 });
    expect(got.map((d) => d.message.message_id)).toEqual([first]);
    const id = got[0].delivery_id as number;
    // strict order: while the first is leased, the second is not handed over
    expect(await pollAs(t.url, 'qa', { max: 10 })).toEqual([]);

    const before = await commits(t.url);
    const groupsBefore = log.groups.length;
    const res = await carry('qa', [id]);
    const after = await commits(t.url);

    expect(res.status).toBe(200);
    // the ack answer's fields, then the inbox's
    expect(Object.keys(res.body)).toEqual(['acked', 'dead_lettered', 'unknown', 'deliveries']);
    expect(res.body).toMatchObject({ acked: [id], dead_lettered: [], unknown: [] });
    expect(res.body.deliveries).toHaveLength(1);
    expect(res.body.deliveries[0]).toMatchObject({
      attempt: 1,
      message: { message_id: second, payload: { n: 2 } },
    });
    expect(res.body.deliveries[0].delivery_id).not.toBe(id);

    // one commit held the ack and the lease, the lease after the ack
    expect(after - before).toBe(1);
    expect(log.groups.slice(groupsBefore)).toEqual([['ack', 'lease']]);

    expect((await stateOf(first)).qa).toBe('acked');
    expect((await stateOf(second)).qa).toBe('leased');
  });

  it('answers ids it does not know in `unknown`, and acks the others', async () => {
    t = await startTestAdapter();
    const sent = await sendAs(t.url, 'pm', '@qa');
    const [d] = await pollAs(t.url, 'qa');
    const res = await carry('qa', [d.delivery_id, 987_654]);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      acked: [d.delivery_id],
      dead_lettered: [],
      unknown: [987_654],
      deliveries: [],
    });
    expect((await stateOf(sent)).qa).toBe('acked');
  });

  it("answers another agent's delivery as unknown, as an id that names none, and leaves it be", async () => {
    t = await startTestAdapter();
    const sent = await sendAs(t.url, 'pm', '@qa');
    const [d] = await pollAs(t.url, 'qa');
    // pm carries qa's delivery and an id no delivery has: the same answer for both (L8)
    const res = await carry('pm', [d.delivery_id, 987_654]);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      acked: [],
      dead_lettered: [],
      unknown: [d.delivery_id, 987_654],
      deliveries: [],
    });
    expect((await stateOf(sent)).qa).toBe('leased');
    // and qa's own ack of it still works
    expect((await carry('qa', [d.delivery_id])).body.acked).toEqual([d.delivery_id]);
    expect((await stateOf(sent)).qa).toBe('acked');
  });

  it('a bad body is a 400 naming delivery_ids, and leases nothing', async () => {
    t = await startTestAdapter();
    const sent = await sendAs(t.url, 'pm', '@qa');
    const bodies: unknown[] = [
      { delivery_ids: [] },
      { delivery_ids: ['x'] },
      { delivery_ids: [1.5] },
      { delivery_ids: [-3] },
      { delivery_ids: Array.from({ length: 1001 }, (_, i) => i + 1) },
      {},
    ];
    for (const body of bodies) {
      const res = await call(t.url, 'POST', '/v1/inbox?wait=0&max=10', { agent: 'qa', body });
      expect([res.status, res.body.error, res.body.field], JSON.stringify(body)).toEqual([
        400,
        'invalid_request',
        'delivery_ids',
      ]);
    }
    // none of them took the message: the next poll has it, first attempt
    expect((await pollAs(t.url, 'qa')).map((d) => [d.message.message_id, d.attempt])).toEqual([
      [sent, 1],
    ]);
  });

  it('without a token: 401', async () => {
    t = await startTestAdapter();
    const res = await call(t.url, 'POST', '/v1/inbox?wait=0', { body: { delivery_ids: [1] } });
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('unauthorized');
  });

  it('with nothing ready it parks after the ack, and a send wakes it with the new delivery', async () => {
    const log = commitLog();
    t = await startTestAdapter({}, { wrapStore: log.wrap });
    const first = await sendAs(t.url, 'pm', '@qa');
    const [d] = await pollAs(t.url, 'qa');

    // parked: its commit (the ack and a lease that found nothing) has returned, and a poll
    // parks in the same turn as that commit
    const looked = log.next(['ack', 'lease']);
    const answer = carry('qa', [d.delivery_id], '?wait=20&max=10');
    await looked;
    await turn();
    expect((await stateOf(first)).qa).toBe('acked'); // acked before the wait is over

    const parkedAt = log.groups.length;
    const second = await sendAs(t.url, 'pm', '@qa', 'status', { n: 2 });
    const res = await answer;
    // handed off: the parked poll's lease went into the send's own commit, after the append,
    // and no commit of its own followed
    expect(log.groups.slice(parkedAt)).toEqual([['append', 'lease']]);
    // a poll whose wait ran out answers no deliveries: this one was woken by the send
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ acked: [d.delivery_id], dead_lettered: [], unknown: [] });
    expect(res.body.deliveries.map((x: Json) => x.message.message_id)).toEqual([second]);
  });
});
