/**
 * Operators over HTTP (CONTRACT.md, "Operators and the console"; docs/design/operators.md): who
 * may call what, the agents and channels views, pause and resume (durable, waking parked polls),
 * search, filtered dead letters, bulk redrive with progress and order, operator messages, and
 * the audit log's chain. A real adapter on port 0 with a SQLite file in a temp folder.
 */
import { hostname } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { auditEntry, GENESIS_HASH } from '../../src/store/rules/operators.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { until, untilParked } from '../helpers/wait.js';

const OP = 'operator:alice';
let t: TestAdapter | undefined;
const extra: TestAdapter[] = [];

afterEach(async () => {
  for (const a of extra.splice(0)) await a.adapter.close();
  await t?.stop();
  t = undefined;
});

async function send(url: string, from: string, to: string, payload: unknown, kind = 'note/text') {
  const r = await call(url, 'POST', '/v1/messages', {
    agent: from,
    body: { to, kind, payload, idempotency_key: `k-${Math.random()}` },
  });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body as Json;
}

/** Makes dead letters of qa: sends `texts` to @qa, leases them and nacks them for good. */
async function deadLettersOfQa(url: string, texts: readonly string[]): Promise<Json[]> {
  const sent = [];
  for (const text of texts) sent.push(await send(url, 'pm', '@qa', { text }));
  const got = await pollAs(url, 'qa', { max: 100 });
  const r = await call(url, 'POST', '/v1/nacks', {
    agent: 'qa',
    body: { delivery_ids: got.map((d: Json) => d.delivery_id), retry: false, reason: 'cannot' },
  });
  expect(r.status).toBe(200);
  return sent;
}

async function redriveDone(url: string, id: string): Promise<Json> {
  let last: Json;
  await until(async () => {
    last = (await call(url, 'GET', `/v1/redrives/${id}`, { agent: OP })).body;
    return last.state === 'done';
  }, `redrive ${id} done`);
  return last;
}

describe('who may call what', () => {
  it('answers each kind of caller clearly', async () => {
    t = await startTestAdapter();
    const { url } = t;
    const wrong = await fetch(`${url}/v1/agents`, { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);
    // an agent on an operator route; alerts_to too: it is not an operator
    for (const agent of ['qa', 'orchestrator']) {
      const r = await call(url, 'POST', '/v1/agents/qa/pause', { agent });
      expect(r.status).toBe(403);
      expect(r.body.error).toBe('not_operator');
    }
    // an operator has no inbox
    const inbox = await call(url, 'GET', '/v1/inbox?wait=0', { agent: OP });
    expect(inbox.status).toBe(403);
    expect(inbox.body.error).toBe('not_an_agent');
    // overseer routes: alerts_to and operators, not other agents
    expect((await call(url, 'GET', '/v1/agents', { agent: 'qa' })).body.error).toBe(
      'not_alerts_agent',
    );
    expect((await call(url, 'GET', '/v1/agents', { agent: 'orchestrator' })).status).toBe(200);
    expect((await call(url, 'GET', '/v1/dead-letters', { agent: OP })).status).toBe(200);
    // a pause of an unknown agent
    const unknown = await call(url, 'POST', '/v1/agents/nobody/pause', { agent: OP });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe('unknown_agent');
    // an operator sees any message's status and journey
    const m = await send(url, 'pm', '@qa', { text: 'hello' });
    expect((await call(url, 'GET', `/v1/messages/${m.message_id}`, { agent: OP })).status).toBe(
      200,
    );
    const j = await call(url, 'GET', `/v1/messages/${m.message_id}/journey`, { agent: OP });
    expect(j.status).toBe(200);
    expect(j.body.recipients[0].agent).toBe('qa');
  });
});

describe('agents and channels', () => {
  it('counts each agent and numbers each channel', async () => {
    t = await startTestAdapter();
    const { url } = t;
    await send(url, 'pm', '@qa', { text: 'one' });
    await send(url, 'pm', '@qa', { text: 'two' }, 'note/todo');
    const critical = await call(url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        to: '@qa',
        kind: 'note/text',
        priority: 'critical',
        payload: {},
        idempotency_key: 'c1',
      },
    });
    expect(critical.status).toBe(201);
    await send(url, 'pm', 'product', { text: 'all' });
    const [first] = await pollAs(url, 'qa', { max: 1 });
    expect(first).toBeDefined();
    const agents = (await call(url, 'GET', '/v1/agents', { agent: OP })).body.agents as Json[];
    const qa = agents.find((a) => a.id === 'qa');
    expect(qa).toMatchObject({
      role: 'qa',
      pending: 3,
      critical_pending: 1, // behind 'one' in @qa: a lane keeps its order
      leased: 1,
      dead_letters: 0,
      stalled: false,
      paused: false,
    });
    expect(typeof qa.last_poll).toBe('string');
    expect(agents.find((a) => a.id === 'growth').last_poll).toBeNull();
    const channels = (await call(url, 'GET', '/v1/channels', { agent: OP })).body
      .channels as Json[];
    expect(channels.find((c) => c.name === 'product')).toMatchObject({
      last_sequence: 1,
      members: ['pm', 'engineering', 'qa', 'research', 'growth'],
    });
    expect(channels.find((c) => c.name === 'platform').last_sequence).toBe(0);
  });
});

describe('pause and resume', () => {
  it('holds deliveries while paused, keeps accepting, wakes a parked poll on resume', async () => {
    t = await startTestAdapter();
    const { url } = t;
    const paused = await call(url, 'POST', '/v1/agents/qa/pause', { agent: OP });
    expect(paused.body).toMatchObject({ agent: 'qa', paused: true, by: OP, changed: true });
    expect((await call(url, 'POST', '/v1/agents/qa/pause', { agent: OP })).body.changed).toBe(
      false,
    );
    const m = await send(url, 'pm', '@qa', { text: 'held' });
    expect(await pollAs(url, 'qa', { wait: 0 })).toEqual([]);
    const j = await call(url, 'GET', `/v1/messages/${m.message_id}/journey`, { agent: 'pm' });
    expect(j.status, JSON.stringify(j.body)).toBe(200);
    expect(j.body.recipients[0].cause).toBe('paused');
    expect(j.body.recipients[0].explanation).toContain(OP);
    // a poll parks; the resume wakes it with the message
    const parked = pollAs(url, 'qa', { wait: 30 });
    await untilParked(url, 'qa');
    const resumed = await call(url, 'POST', '/v1/agents/qa/resume', { agent: OP });
    expect(resumed.body).toMatchObject({ paused: false, changed: true });
    const got = await parked;
    expect(got.map((d: Json) => d.message.message_id)).toEqual([m.message_id]);
    const events = (
      await call(url, 'GET', `/v1/messages/${m.message_id}/journey`, { agent: OP })
    ).body.recipients[0].events.map((e: Json) => e.event);
    expect(events).toEqual(['queued', 'resumed', 'leased']);
  });

  it('stays paused across a restart of the adapter', async () => {
    t = await startTestAdapter();
    await call(t.url, 'POST', '/v1/agents/qa/pause', { agent: OP });
    await send(t.url, 'pm', '@qa', { text: 'kept' });
    await t.adapter.close();
    const again = await startTestAdapter({ db: t.db });
    extra.push(again);
    expect(await pollAs(again.url, 'qa', { wait: 0 })).toEqual([]);
    const qa = (await call(again.url, 'GET', '/v1/agents', { agent: OP })).body.agents.find(
      (a: Json) => a.id === 'qa',
    );
    expect(qa).toMatchObject({ paused: true, paused_by: OP, pending: 1 });
    await call(again.url, 'POST', '/v1/agents/qa/resume', { agent: OP });
    expect(await pollAs(again.url, 'qa', { wait: 0 })).toHaveLength(1);
  });
});

describe('search', () => {
  it('finds messages by their words, newest first, with filters and pages', async () => {
    t = await startTestAdapter();
    const { url } = t;
    const a = await send(url, 'pm', '@qa', { text: 'the blue whale', tags: ['ocean'] });
    const b = await send(url, 'pm', 'product', { body: { deep: 'Blue skies' } }, 'status/update');
    await send(url, 'engineering', '@qa', { text: 'red fox' });
    const ids = async (query: string) =>
      (
        (await call(url, 'GET', `/v1/messages?${query}`, { agent: OP })).body.messages as Json[]
      ).map((m) => m.message_id);
    expect(await ids('q=blue')).toEqual([b.message_id, a.message_id]);
    expect(await ids('q=ocean')).toEqual([a.message_id]);
    expect(await ids('q=blue&channel=product')).toEqual([b.message_id]);
    expect(await ids('q=status')).toEqual([b.message_id]); // the kind's words
    expect(await ids('sender=engineering')).toHaveLength(1);
    expect(await ids('q=%22AND%20*%3A')).toEqual([]); // query syntax is text
    const first = await call(url, 'GET', '/v1/messages?q=blue&limit=1', { agent: OP });
    expect(first.body.messages.map((m: Json) => m.message_id)).toEqual([b.message_id]);
    const next = await call(
      url,
      'GET',
      `/v1/messages?q=blue&limit=1&after=${first.body.next_after}`,
      {
        agent: OP,
      },
    );
    expect(next.body.messages.map((m: Json) => m.message_id)).toEqual([a.message_id]);
    const long = await call(url, 'GET', `/v1/messages?q=${'x'.repeat(300)}`, { agent: OP });
    expect(long.status).toBe(400);
    expect(long.body.field).toBe('q');
  });
});

describe('dead letters and bulk redrive', () => {
  it('filters dead letters and redrives the selected in channel order, once', async () => {
    t = await startTestAdapter();
    const { url } = t;
    const sent = await deadLettersOfQa(url, ['alpha one', 'alpha two', 'beta three']);
    const list = async (q: string) =>
      (await call(url, 'GET', `/v1/dead-letters?${q}`, { agent: OP })).body.dead_letters as Json[];
    expect(await list('q=alpha')).toHaveLength(2);
    expect(await list('reason=rejected&recipient=qa')).toHaveLength(3);
    expect(await list('recipient=pm')).toHaveLength(0);
    const dls = await list('');
    // selected in reverse order: handed over in sequence order all the same
    const ids = dls.map((d) => d.id).reverse();
    const made = await call(url, 'POST', '/v1/dead-letters/redrive', {
      agent: OP,
      body: { ids: [...ids, 999_999] },
    });
    expect(made.status).toBe(202);
    expect(made.body.count).toBe(4);
    const done = await redriveDone(url, made.body.redrive_id);
    expect(done).toMatchObject({ total: 4, done: 3, skipped: 1 });
    expect(await list('')).toEqual([]);
    const got = await pollAs(url, 'qa', { max: 10 });
    expect(got.map((d: Json) => d.message.message_id)).toEqual(sent.map((m) => m.message_id));
    // a second redrive of the same ids finds them pending again: skipped, nothing handed twice
    const again = await call(url, 'POST', '/v1/dead-letters/redrive', { agent: OP, body: { ids } });
    expect(await redriveDone(url, again.body.redrive_id)).toMatchObject({ done: 0, skipped: 3 });
    const journey = await call(url, 'GET', `/v1/messages/${sent[0].message_id}/journey`, {
      agent: OP,
    });
    const redriven = journey.body.recipients[0].events.filter((e: Json) => e.event === 'redriven');
    expect(redriven).toHaveLength(1);
    expect(redriven[0].detail).toMatchObject({ by: OP, redrive: made.body.redrive_id });
  });

  it('answers bad redrives clearly', async () => {
    t = await startTestAdapter();
    const { url } = t;
    const nothing = await call(url, 'POST', '/v1/dead-letters/redrive', {
      agent: OP,
      body: { filter: { q: 'nothing matches this' } },
    });
    expect(nothing.status).toBe(202);
    expect(nothing.body.count).toBe(0);
    expect(await redriveDone(url, nothing.body.redrive_id)).toMatchObject({ total: 0, done: 0 });
    for (const [body, field] of [
      [{}, 'ids'],
      [{ ids: [1], filter: {} }, 'ids'],
      [{ ids: [] }, 'ids'],
      [{ ids: ['x'] }, 'ids.0'],
      [{ filter: { colour: 'red' } }, 'filter.colour'],
      [{ filter: {}, rate: 0 }, 'rate'],
    ] as const) {
      const r = await call(url, 'POST', '/v1/dead-letters/redrive', { agent: OP, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.field, JSON.stringify(body)).toBe(field);
    }
    expect((await call(url, 'GET', '/v1/redrives/rd_0000000000000000', { agent: OP })).status).toBe(
      404,
    );
    expect((await call(url, 'GET', '/v1/redrives/../x', { agent: OP })).status).toBe(404);
  });

  it('streams 10,000 matching dead letters at its rate and finishes them all', async () => {
    t = await startTestAdapter({ queueCapacity: '20000' });
    const { url } = t;
    // 10,000 dead letters of qa, made through the store (HTTP would take minutes)
    const now = Date.now();
    const drafts = Array.from({ length: 10_000 }, (_, i) => ({
      sender: 'pm',
      idempotencyKey: `bulk-${i}`,
      fingerprint: Buffer.alloc(32, i % 251),
      channel: '@qa',
      kind: 'note/text',
      priority: 'normal' as const,
      replyTo: null,
      payloadJson: JSON.stringify({ text: `bulk item ${i}` }),
      receivedAt: now,
      recipients: ['qa'],
    }));
    for (let i = 0; i < drafts.length; i += 1000)
      await t.store.commit([{ op: 'append', drafts: drafts.slice(i, i + 1000) as never }]);
    for (;;) {
      const [leased] = (await t.store.commit([{ op: 'lease', agent: 'qa', max: 1000, now }]))
        .results as { ok: string[] }[];
      const ids = leased!.ok.map((d) => (JSON.parse(d) as Json).delivery_id);
      if (ids.length === 0) break;
      await t.store.commit([{ op: 'nack', agent: 'qa', ids, now, retry: false, reason: 'bulk' }]);
    }
    const made = await call(url, 'POST', '/v1/dead-letters/redrive', {
      agent: OP,
      body: { filter: { q: 'bulk', recipient: 'qa' }, rate: 5000 },
    });
    expect(made.body.count).toBe(10_000);
    const seen: number[] = [];
    await until(async () => {
      const p = (await call(url, 'GET', `/v1/redrives/${made.body.redrive_id}`, { agent: OP }))
        .body;
      seen.push(p.done);
      return p.state === 'done';
    }, 'the redrive done');
    expect(seen.at(-1)).toBe(10_000);
    // it went in steps: progress was seen between none and all
    expect(seen.some((n) => n > 0 && n < 10_000)).toBe(true);
    const qa = (await call(url, 'GET', '/v1/agents', { agent: OP })).body.agents.find(
      (a: Json) => a.id === 'qa',
    );
    expect(qa).toMatchObject({ pending: 10_000, dead_letters: 0 });
  });
});

describe('operator messages and the audit log', () => {
  it('sends as operator:<id> to any channel, continues a thread, and audits each act', async () => {
    t = await startTestAdapter({ hopBudget: '1' });
    const { url } = t;
    const m = await call(url, 'POST', '/v1/messages', {
      agent: OP,
      body: { to: 'platform', kind: 'note/text', payload: { text: 'hi' }, idempotency_key: 'o1' },
    });
    expect(m.status).toBe(201);
    const [d] = await pollAs(url, 'orchestrator');
    expect(d.message.sender).toBe(OP);
    // a thread past its hop budget: an agent's reply is refused, the operator's continues it
    const root = await send(url, 'pm', '@qa', { text: 'root' });
    const r1 = await call(url, 'POST', '/v1/messages', {
      agent: 'qa',
      body: {
        to: '@pm',
        kind: 'note/text',
        payload: {},
        idempotency_key: 'r1',
        reply_to: root.message_id,
      },
    });
    expect(r1.status).toBe(201);
    const r2 = await call(url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        to: '@qa',
        kind: 'note/text',
        payload: {},
        idempotency_key: 'r2',
        reply_to: r1.body.message_id,
      },
    });
    expect(r2.status).toBe(422);
    const cont = await call(url, 'POST', '/v1/messages', {
      agent: OP,
      body: {
        to: '@qa',
        kind: 'note/text',
        payload: {},
        idempotency_key: 'c',
        reply_to: r1.body.message_id,
      },
    });
    expect(cont.status).toBe(201);
    expect(cont.body.hop).toBe(0);
    await call(url, 'POST', '/v1/agents/growth/pause', { agent: OP });
    await call(url, 'POST', '/v1/agents/growth/resume', { agent: OP });
    const audit = await call(url, 'GET', '/v1/audit', { agent: OP });
    const entries = audit.body.entries as Json[];
    expect(entries.map((e) => [e.actor, e.action, e.target])).toEqual([
      // the adapter's own start, first in the chain
      ['adapter', 'start', hostname()],
      [OP, 'message', m.body.message_id],
      [OP, 'message', cont.body.message_id],
      [OP, 'pause', 'growth'],
      [OP, 'resume', 'growth'],
    ]);
    // one chain: each entry's hash is recomputed from the one before
    let prev = GENESIS_HASH;
    for (const e of entries) {
      expect(e.prev_hash).toBe(prev);
      const again = auditEntry(
        e.seq,
        {
          at: Date.parse(e.at),
          actor: e.actor,
          action: e.action,
          target: e.target,
          detail: e.detail,
        },
        prev,
      );
      expect(again.hash).toBe(e.hash);
      prev = e.hash;
    }
    const page = await call(url, 'GET', `/v1/audit?after=${entries[2].seq}&limit=1`, { agent: OP });
    expect(page.body.entries.map((e: Json) => e.action)).toEqual(['pause']);
    expect((await call(url, 'GET', '/v1/audit', { agent: 'orchestrator' })).status).toBe(403);
  });
});

describe('the console', () => {
  it('is one page with a strict CSP and no cookie, and off answers 404', async () => {
    t = await startTestAdapter();
    const page = await fetch(`${t.url}/console`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    expect(page.headers.get('set-cookie')).toBeNull();
    expect(await page.text()).toContain('/console/app.js');
    expect((await fetch(`${t.url}/console/console.css`)).status).toBe(200);
    expect((await fetch(`${t.url}/console/page.js`)).status).toBe(404);
    expect((await fetch(`${t.url}/console/..%2Fcli%2Fmain.js`)).status).toBe(404);
    const off = await startTestAdapter({ console: 'off' });
    extra.push(off);
    expect((await fetch(`${off.url}/console`)).status).toBe(404);
  });
});
