/**
 * Threads and budgets through the adapter's HTTP API (docs/reference/adapter-api.md, "Threads and
 * budgets"): the thread and hop every reply gets, the budgets that refuse with 422 and store
 * nothing (also against 20 concurrent replies), the continuation by alerts_to, alert/budget once
 * per sender and window, the thread view for alerts_to only, and reply_to to what the sender could
 * not see.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const start = async (overrides: Record<string, string> = {}) => {
  t = await startTestAdapter(overrides);
  return t;
};
const post = (agent: string, to: string, extra: Record<string, unknown> = {}) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind: 'status', payload: { n: 1 }, ...extra },
  });
/** A send that must be stored: its 201 body (the assigned fields). */
const send = async (agent: string, to: string, extra: Record<string, unknown> = {}) => {
  const r = await post(agent, to, extra);
  if (r.status !== 201) throw new Error(`${agent} to ${to}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body as Json;
};
const thread = (id: string, agent = 'orchestrator', query = '') =>
  call(t!.url, 'GET', `/v1/threads/${id}/messages${query}`, { agent });
/** Group commits so far (agw_commit_messages' count). */
const commits = async () =>
  Number(
    /^agw_commit_messages_count (\d+)$/m.exec((await call(t!.url, 'GET', '/metrics')).body)?.[1],
  );
/** Stored messages of a thread, read from the file behind the adapter's back. */
function storedIn(threadId: string): number {
  const db = new Database(t!.db, { readonly: true });
  try {
    const row = db
      .prepare('SELECT count(*) AS n FROM messages WHERE message_id = ? OR thread_id = ?')
      .get(threadId, threadId) as { n: number };
    return row.n;
  } finally {
    db.close();
  }
}

describe('reply_to', () => {
  it('places a reply in the thread of the message it names, in any channel, and every reader sees thread_id and hop', async () => {
    await start();
    const root = await send('pm', '@qa');
    expect(root).toMatchObject({ thread_id: root.message_id, hop: 0 });
    // qa answers pm's direct message in the product channel
    const answer = await send('qa', 'product', { reply_to: root.message_id });
    expect(answer).toMatchObject({ thread_id: root.message_id, hop: 1 });
    const [d] = await pollAs(t!.url, 'pm');
    expect(d.message).toMatchObject({
      message_id: answer.message_id,
      reply_to: root.message_id,
      thread_id: root.message_id,
      hop: 1,
    });
    const replay = await call(t!.url, 'GET', '/v1/channels/product/messages', {
      agent: 'research',
    });
    expect(replay.body.messages[0]).toMatchObject({ thread_id: root.message_id, hop: 1 });
    const status = await call(t!.url, 'GET', `/v1/messages/${answer.message_id}`, { agent: 'qa' });
    expect(status.body.message).toMatchObject({ thread_id: root.message_id, hop: 1 });
  });

  it('is 404 reply_to_not_found for a message the sender could not see, as for one that does not exist', async () => {
    await start();
    const dm = await send('pm', '@qa'); // between pm and qa alone
    const hidden = await post('research', '@pm', { reply_to: dm.message_id });
    const unknown = await post('research', '@pm', {
      reply_to: '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11',
    });
    for (const r of [hidden, unknown]) {
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ error: 'reply_to_not_found', field: 'reply_to' });
    }
    // the same sentence for both, but for the id: it tells a stranger nothing
    expect(hidden.body.message.replace(dm.message_id, 'ID')).toBe(
      unknown.body.message.replace('0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11', 'ID'),
    );
    // reply_to_sequence_id too: a sequence the channel has not assigned, and one of another's
    const missing = await post('pm', 'product', { reply_to_sequence_id: 1 });
    const notSeen = await post('research', '@qa', { reply_to_sequence_id: 1 });
    for (const r of [missing, notSeen]) {
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ error: 'reply_to_not_found', field: 'reply_to_sequence_id' });
    }
    // not a message_id at all: a bad envelope
    const bad = await post('research', '@pm', { reply_to: 'M-1' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: 'invalid_envelope', field: 'reply_to' });
    expect(storedIn(dm.message_id)).toBe(1);
    // a member of the channel may answer what it could replay, the recipient what it received
    const group = await send('pm', 'product');
    expect((await post('research', '@pm', { reply_to: group.message_id })).status).toBe(201);
    expect((await post('qa', '@pm', { reply_to: dm.message_id })).status).toBe(201);
    expect((await post('orchestrator', '@pm', { reply_to: dm.message_id })).status).toBe(201);
  });

  it('takes reply_to into the fingerprint: the same key with another reply_to is 409', async () => {
    await start();
    const a = await send('pm', '@qa');
    const b = await send('pm', '@qa');
    const body = {
      idempotency_key: randomUUID(),
      to: '@pm',
      kind: 'status',
      payload: {},
      reply_to: a.message_id,
    };
    const first = await call(t!.url, 'POST', '/v1/messages', { agent: 'qa', body });
    const again = await call(t!.url, 'POST', '/v1/messages', { agent: 'qa', body });
    const other = await call(t!.url, 'POST', '/v1/messages', {
      agent: 'qa',
      body: { ...body, reply_to: b.message_id },
    });
    expect(first.status).toBe(201);
    expect(again).toMatchObject({ status: 200, body: { ...first.body, duplicate: true } });
    expect(other.status).toBe(409);
    expect(other.body.error).toBe('idempotency_conflict');
  });
});

describe('budgets', () => {
  it('refuses a reply past AGW_HOP_BUDGET with 422 hop_budget_exceeded and stores nothing', async () => {
    await start({ hopBudget: '2' });
    const root = await send('pm', '@qa');
    const h1 = await send('qa', '@pm', { reply_to: root.message_id });
    const h2 = await send('pm', '@qa', { reply_to: h1.message_id });
    expect([h1.hop, h2.hop]).toEqual([1, 2]);
    const h3 = await post('qa', '@pm', { reply_to: h2.message_id });
    expect(h3.status).toBe(422);
    expect(h3.body.error).toBe('hop_budget_exceeded');
    expect(storedIn(root.message_id)).toBe(3);
  });

  it('stores exactly one of 20 concurrent replies to a thread one short of AGW_THREAD_BUDGET', async () => {
    await start({ threadBudget: '5' });
    const root = await send('pm', 'product');
    for (const agent of ['qa', 'engineering', 'research']) {
      await send(agent, 'product', { reply_to: root.message_id });
    }
    expect(storedIn(root.message_id)).toBe(4); // one short
    // 20 connections opened first, so that the 20 replies reach the adapter together and share
    // its group commits, as concurrent requests of many agents do
    const pool = new Pool(t!.url, { connections: 20, pipelining: 1 });
    try {
      await Promise.all(
        Array.from({ length: 20 }, () =>
          pool.request({ method: 'GET', path: '/healthz' }).then((r) => r.body.text()),
        ),
      );
      const commitsBefore = await commits();
      const agents = ['qa', 'engineering', 'research', 'growth', 'pm'];
      const answers = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const agent = agents[i % agents.length]!;
          const r = await pool.request({
            method: 'POST',
            path: '/v1/messages',
            headers: {
              authorization: `Bearer ${tokenOf(agent)}`,
              'content-type': 'application/json',
            },
            body: JSON.stringify({
              idempotency_key: randomUUID(),
              to: 'product',
              kind: 'status',
              reply_to: root.message_id,
            }),
          });
          return { status: r.statusCode, body: (await r.body.json()) as Json };
        }),
      );
      const statuses = answers.map((r) => r.status).sort();
      expect(statuses).toEqual([201, ...Array(19).fill(422)]);
      for (const r of answers.filter((a) => a.status === 422)) {
        expect(r.body.error).toBe('thread_budget_exceeded');
      }
      // they did meet: fewer commits than replies
      expect((await commits()) - commitsBefore).toBeLessThan(20);
    } finally {
      await pool.close();
    }
    expect(storedIn(root.message_id)).toBe(5);
  });

  it('lets alerts_to continue a thread at its budget: hop 0, and the count starts again with it', async () => {
    await start({ threadBudget: '3', hopBudget: '8' });
    const root = await send('pm', '@qa');
    const r1 = await send('qa', '@pm', { reply_to: root.message_id });
    await send('pm', '@qa', { reply_to: r1.message_id });
    const refused = await post('qa', '@pm', { reply_to: root.message_id });
    expect(refused.status).toBe(422);
    // the orchestrator read the thread and lets it go on
    const cont = await send('orchestrator', '@qa', { reply_to: r1.message_id });
    expect(cont).toMatchObject({ thread_id: root.message_id, hop: 0 });
    const on1 = await send('qa', '@pm', { reply_to: cont.message_id });
    const on2 = await send('pm', '@qa', { reply_to: on1.message_id });
    expect([on1.hop, on2.hop, on2.thread_id]).toEqual([1, 2, root.message_id]);
    expect((await post('qa', '@pm', { reply_to: on2.message_id })).status).toBe(422);
    expect(storedIn(root.message_id)).toBe(6);
  });

  it('tells alerts_to with one alert/budget per sender and window, however many refusals in however many threads', async () => {
    await start({ threadBudget: '2' });
    const threads = [];
    for (const to of ['@qa', '@engineering']) {
      const root = await send('pm', to);
      await send(to.slice(1), '@pm', { reply_to: root.message_id });
      threads.push(root);
    }
    const [a, b] = threads;
    for (let i = 0; i < 4; i++) {
      expect((await post('pm', '@qa', { reply_to: a.message_id })).status).toBe(422);
    }
    // pm refused in another thread: counted towards pm's alert, not one of its own
    expect((await post('pm', '@engineering', { reply_to: b.message_id })).status).toBe(422);
    // another sender refused: its own alert, at once
    expect((await post('qa', '@pm', { reply_to: a.message_id })).status).toBe(422);
    const alerts = (await pollAs(t!.url, 'orchestrator', { max: 100 })).map((d) => d.message);
    expect(alerts.map((m) => [m.kind, m.sender, m.priority])).toEqual([
      ['alert/budget', 'adapter', 'critical'],
      ['alert/budget', 'adapter', 'critical'],
    ]);
    expect(alerts.map((m) => m.payload)).toEqual([
      {
        reason: 'thread_budget_exceeded',
        thread_id: a.message_id,
        sender: 'pm',
        count: 1,
        message_ids: [a.message_id],
      },
      {
        reason: 'thread_budget_exceeded',
        thread_id: a.message_id,
        sender: 'qa',
        count: 1,
        message_ids: [a.message_id],
      },
    ]);
  });
});

describe('GET /v1/threads/{thread_id}/messages', () => {
  it('shows alerts_to every message of a thread across channels in commit order, paged, and refuses anyone else', async () => {
    await start();
    const root = await send('pm', '@qa');
    await send('pm', 'product'); // another thread
    const r1 = await send('qa', 'product', { reply_to: root.message_id });
    const r2 = await send('orchestrator', '@qa', { reply_to: r1.message_id });
    const r3 = await send('qa', 'all-agents', { reply_to: r2.message_id });
    const ids = [root, r1, r2, r3].map((m) => m.message_id);
    const all = await thread(root.message_id);
    expect(all.status).toBe(200);
    expect(all.body.messages.map((m: Json) => m.message_id)).toEqual(ids);
    expect(all.body.messages.map((m: Json) => [m.channel, m.hop])).toEqual([
      ['@qa', 0],
      ['product', 1],
      ['@qa', 0],
      ['all-agents', 1],
    ]);
    // paged: next_after is the cursor to pass as `after`; null once a page is empty
    const p1 = await thread(root.message_id, 'orchestrator', '?limit=3');
    const p2 = await thread(
      root.message_id,
      'orchestrator',
      `?limit=3&after=${p1.body.next_after}`,
    );
    const p3 = await thread(
      root.message_id,
      'orchestrator',
      `?limit=3&after=${p2.body.next_after}`,
    );
    expect([p1, p2].map((p) => p.body.messages.map((m: Json) => m.message_id))).toEqual([
      ids.slice(0, 3),
      ids.slice(3),
    ]);
    expect(p3.body).toEqual({ messages: [], next_after: null });
    for (const agent of ['pm', 'qa']) {
      const r = await thread(root.message_id, agent);
      expect(r.status).toBe(403);
      expect(r.body.error).toBe('not_alerts_agent');
    }
  });
});
