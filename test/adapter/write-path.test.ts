import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';

let t: TestAdapter;
beforeEach(async () => {
  t = await startTestAdapter();
});
afterEach(async () => {
  await t.stop();
});

const post = (agent: string, body: unknown) => call(t.url, 'POST', '/v1/messages', { agent, body });
const msg = (to: string, extra: Record<string, unknown> = {}) => ({
  idempotency_key: randomUUID(),
  to,
  kind: 'status',
  payload: { text: 'hello' },
  ...extra,
});
function rows<T>(sql: string, ...params: unknown[]): T[] {
  const db = new Database(t.db, { readonly: true });
  try {
    return db.prepare(sql).all(...params) as T[];
  } finally {
    db.close();
  }
}

describe('POST /v1/messages', () => {
  it('answers 201 with the assigned fields, numbering each channel from 1', async () => {
    const before = Date.now();
    const a = await post('pm', msg('product'));
    const b = await post('qa', msg('product'));
    const c = await post('pm', msg('all-agents'));
    const d = await post('pm', msg('@qa'));
    expect(a.status).toBe(201);
    expect(a.body).toMatchObject({ channel: 'product', channel_sequence_id: 1, duplicate: false });
    expect(b.body.channel_sequence_id).toBe(2);
    expect(c.body).toMatchObject({ channel: 'all-agents', channel_sequence_id: 1 });
    expect(d.body).toMatchObject({ channel: '@qa', channel_sequence_id: 1 });
    const at = Date.parse(a.body.timestamp_iso8601);
    expect(at).toBeGreaterThanOrEqual(before);
    expect(at).toBeLessThanOrEqual(Date.now());
    expect(a.body.message_id).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
  });

  it('returns the original assignment with duplicate: true for the same key and body', async () => {
    const m = msg('product', { payload: { b: 1, a: { y: 2, x: 1 } } });
    const first = await post('pm', m);
    // the same body re-serialized in another key order is the same body
    const again = await post('pm', { ...m, payload: { a: { x: 1, y: 2 }, b: 1 } });
    expect(first.status).toBe(201);
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ ...first.body, duplicate: true });
    expect(rows('SELECT * FROM messages')).toHaveLength(1);
  });

  it('scopes idempotency keys to the sender', async () => {
    const key = randomUUID();
    const a = await post('pm', msg('product', { idempotency_key: key }));
    const b = await post('qa', msg('product', { idempotency_key: key }));
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.body.channel_sequence_id).toBe(2);
  });

  it('refuses the same key with another body (409) and keeps the first', async () => {
    const m = msg('product');
    const first = await post('pm', m);
    const other = await post('pm', { ...m, payload: { text: 'changed' } });
    expect(other.status).toBe(409);
    expect(other.body.error).toBe('idempotency_conflict');
    const stored = rows<{ body: string }>('SELECT body FROM messages');
    expect(stored).toHaveLength(1);
    expect(JSON.parse(stored[0]!.body)).toMatchObject({
      message_id: first.body.message_id,
      payload: { text: 'hello' },
    });
  });

  it('creates one delivery row per recipient, none for the sender of a channel message', async () => {
    await post('pm', msg('product', { priority: 'critical' }));
    await post('engineering', msg('@engineering'));
    const deliveries = rows<{ recipient: string; priority: number; channel: string }>(
      'SELECT d.recipient, d.priority, m.channel FROM deliveries d JOIN messages m ON m.id = d.message ORDER BY d.id',
    );
    expect(deliveries).toEqual([
      { recipient: 'engineering', priority: 1, channel: 'product' },
      { recipient: 'qa', priority: 1, channel: 'product' },
      { recipient: 'research', priority: 1, channel: 'product' },
      { recipient: 'growth', priority: 1, channel: 'product' },
      { recipient: 'engineering', priority: 0, channel: '@engineering' },
    ]);
  });

  it('accepts reply_to_sequence_id only for a message of the channel: 404 reply_to_not_found otherwise', async () => {
    await post('pm', msg('product'));
    const ok = await post('qa', msg('product', { reply_to_sequence_id: 1 }));
    expect(ok.status).toBe(201);
    const bad = await post('qa', msg('product', { reply_to_sequence_id: 3 }));
    expect(bad.status).toBe(404);
    expect(bad.body).toMatchObject({ error: 'reply_to_not_found', field: 'reply_to_sequence_id' });
    const elsewhere = await post('pm', msg('all-agents', { reply_to_sequence_id: 1 }));
    expect(elsewhere.body.error).toBe('reply_to_not_found');
    expect(rows('SELECT * FROM messages')).toHaveLength(2);
  });

  it('checks the payload of the task kinds', async () => {
    const ok = await post(
      'pm',
      msg('product', { kind: 'task/result', payload: { task_id: 'T-1', status: 'success' } }),
    );
    expect(ok.status).toBe(201);
    const bad = await post(
      'pm',
      msg('product', { kind: 'task/result', payload: { task_id: 'T-1', status: 'done' } }),
    );
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: 'invalid_envelope', field: 'payload.status' });
  });

  it('stores the message as every reader sees it', async () => {
    const m = msg('product', {
      kind: 'task/request',
      payload: { task_id: 'T-9', description: 'ship it' },
    });
    const ack = await post('pm', m);
    const replay = await call(t.url, 'GET', '/v1/channels/product/messages', { agent: 'qa' });
    expect(replay.body.messages).toEqual([
      {
        message_id: ack.body.message_id,
        channel: 'product',
        channel_sequence_id: 1,
        sender: 'pm',
        timestamp_iso8601: ack.body.timestamp_iso8601,
        idempotency_key: m.idempotency_key,
        to: 'product',
        kind: 'task/request',
        priority: 'normal',
        thread_id: ack.body.message_id,
        hop: 0,
        payload: { task_id: 'T-9', description: 'ship it' },
      },
    ]);
  });
});

describe('POST /v1/messages/batch', () => {
  it('answers each item in order and commits the accepted ones together', async () => {
    const dup = msg('product');
    await post('pm', dup);
    const res = await call(t.url, 'POST', '/v1/messages/batch', {
      agent: 'pm',
      body: {
        messages: [
          msg('product'),
          msg('platform'),
          dup,
          msg('@nobody'),
          msg('product'),
          { to: 'product' },
        ],
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.results.map((r: { status: number }) => r.status)).toEqual([
      201, 403, 200, 404, 201, 400,
    ]);
    expect(res.body.results[0].channel_sequence_id).toBe(2);
    expect(res.body.results[2]).toMatchObject({ channel_sequence_id: 1, duplicate: true });
    expect(res.body.results[4].channel_sequence_id).toBe(3);
    expect(res.body.results[5]).toMatchObject({
      error: 'invalid_envelope',
      field: 'idempotency_key',
    });
    expect(rows('SELECT * FROM messages')).toHaveLength(3);
  });

  it('sees a key repeated inside one batch as a duplicate of the earlier item', async () => {
    const m = msg('product');
    const res = await call(t.url, 'POST', '/v1/messages/batch', {
      agent: 'pm',
      body: { messages: [m, m] },
    });
    expect(res.body.results.map((r: { status: number }) => r.status)).toEqual([201, 200]);
    expect(rows('SELECT * FROM messages')).toHaveLength(1);
  });

  it('refuses an empty or oversized batch naming the field', async () => {
    for (const messages of [[], Array.from({ length: 101 }, () => msg('product')), 'x']) {
      const res = await call(t.url, 'POST', '/v1/messages/batch', {
        agent: 'pm',
        body: { messages },
      });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: 'invalid_request', field: 'messages' });
    }
  });
});

describe('GET /v1/channels/{name}/messages', () => {
  it('pages through a channel in sequence order for members only', async () => {
    for (let i = 0; i < 5; i++) await post(i % 2 ? 'qa' : 'pm', msg('product', { payload: { i } }));
    const page = await call(t.url, 'GET', '/v1/channels/product/messages?after=1&limit=3', {
      agent: 'growth',
    });
    expect(page.status).toBe(200);
    expect(
      page.body.messages.map((m: { channel_sequence_id: number }) => m.channel_sequence_id),
    ).toEqual([2, 3, 4]);
    expect(page.body.messages.map((m: { payload: { i: number } }) => m.payload.i)).toEqual([
      1, 2, 3,
    ]);
    const outsider = await call(t.url, 'GET', '/v1/channels/product/messages', {
      agent: 'orchestrator',
    });
    expect(outsider.status).toBe(403);
    expect(outsider.body.error).toBe('not_member');
  });

  it('lets only the owner read a direct channel', async () => {
    await post('pm', msg('@qa'));
    const own = await call(t.url, 'GET', `/v1/channels/${encodeURIComponent('@qa')}/messages`, {
      agent: 'qa',
    });
    expect(own.body.messages).toHaveLength(1);
    const other = await call(t.url, 'GET', '/v1/channels/@qa/messages', { agent: 'pm' });
    expect(other.status).toBe(403);
  });

  it('answers 404 for an unknown channel and 400 for a bad query', async () => {
    expect(
      (await call(t.url, 'GET', '/v1/channels/nope/messages', { agent: 'pm' })).body.error,
    ).toBe('unknown_channel');
    const bad = await call(t.url, 'GET', '/v1/channels/product/messages?limit=0', { agent: 'pm' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: 'invalid_request', field: 'limit' });
  });
});

describe('health', () => {
  it('answers /healthz and /health once the store is checked', async () => {
    expect((await call(t.url, 'GET', '/healthz')).status).toBe(200);
    expect((await call(t.url, 'GET', '/health')).body).toEqual({ status: 'ready' });
  });

  it('counts outcomes in /metrics', async () => {
    await post('pm', msg('product'));
    await post('pm', msg('platform'));
    const res = await fetch(`${t.url}/metrics`);
    const text = await res.text();
    expect(text).toMatch(/agw_messages_total\{outcome="created"\} 1/);
    expect(text).toMatch(/agw_messages_total\{outcome="not_member"\} 1/);
    expect(text).toMatch(/agw_commit_messages_sum 1\n/);
  });
});
