import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';

let t: TestAdapter;
beforeAll(async () => {
  t = await startTestAdapter({ maxMessageBytes: '4096' });
});
afterAll(async () => {
  await t.stop();
});

function count(): { messages: number; deliveries: number } {
  const db = new Database(t.db, { readonly: true });
  try {
    return db
      .prepare(
        'SELECT (SELECT count(*) FROM messages) AS messages, (SELECT count(*) FROM deliveries) AS deliveries',
      )
      .get() as {
      messages: number;
      deliveries: number;
    };
  } finally {
    db.close();
  }
}

const good = () => ({ idempotency_key: randomUUID(), to: 'product', kind: 'status', payload: {} });

interface Case {
  name: string;
  status: number;
  error: string;
  field?: string;
  agent?: string;
  body?: unknown;
  raw?: string;
  headers?: Record<string, string>;
}

const cases: Case[] = [
  {
    name: 'a body claiming another sender',
    status: 403,
    error: 'sender_mismatch',
    field: 'sender',
    body: { ...good(), sender: 'qa' },
  },
  {
    name: 'a non-member posting to a channel',
    status: 403,
    error: 'not_member',
    field: 'to',
    agent: 'orchestrator',
  },
  {
    name: 'an unknown channel',
    status: 404,
    error: 'unknown_channel',
    field: 'to',
    body: { ...good(), to: 'nope' },
  },
  {
    name: 'an unknown agent',
    status: 404,
    error: 'unknown_agent',
    field: 'to',
    body: { ...good(), to: '@nobody' },
  },
  {
    name: 'a body over the size limit',
    status: 413,
    error: 'payload_too_large',
    body: { ...good(), payload: { x: 'y'.repeat(5000) } },
  },
  {
    name: 'malformed JSON',
    status: 400,
    error: 'invalid_json',
    raw: '{"idempotency_key": "k", "to": ',
  },
  {
    name: 'a missing field',
    status: 400,
    error: 'invalid_envelope',
    field: 'kind',
    body: { ...good(), kind: undefined },
  },
  {
    name: 'a wrongly typed field',
    status: 400,
    error: 'invalid_envelope',
    field: 'priority',
    body: { ...good(), priority: 'urgent' },
  },
  {
    name: 'an unknown field',
    status: 400,
    error: 'invalid_envelope',
    field: 'channel',
    body: { ...good(), channel: 'product' },
  },
  {
    name: 'a payload that is not an object',
    status: 400,
    error: 'invalid_envelope',
    field: 'payload',
    body: { ...good(), payload: [1] },
  },
  {
    name: 'an alert kind from an agent',
    status: 400,
    error: 'invalid_envelope',
    field: 'kind',
    body: { ...good(), kind: 'alert/dead-letter' },
  },
  {
    name: 'a body that is not an object',
    status: 400,
    error: 'invalid_envelope',
    field: 'body',
    raw: '[1,2]',
  },
  { name: 'a missing token', status: 401, error: 'unauthorized', agent: '' },
  {
    name: 'a wrong token',
    status: 401,
    error: 'unauthorized',
    agent: '',
    headers: { authorization: 'Bearer not-a-token' },
  },
  {
    name: 'the wrong method',
    status: 405,
    error: 'method_not_allowed',
    headers: { 'x-method': 'PUT' },
  },
];

describe('every rejection answers its code and stores nothing', () => {
  it.each(cases)('$name → $status $error', async (c) => {
    const before = count();
    const method = c.headers?.['x-method'] ?? 'POST';
    const agent = c.agent === undefined ? 'pm' : c.agent === '' ? undefined : c.agent;
    const res = await call(t.url, method, '/v1/messages', {
      ...(agent === undefined ? {} : { agent }),
      ...(c.raw === undefined ? { body: c.body ?? good() } : { raw: c.raw }),
      ...(c.headers === undefined ? {} : { headers: c.headers }),
    });
    expect(res.status).toBe(c.status);
    expect(res.body.error).toBe(c.error);
    expect(typeof res.body.message).toBe('string');
    if (c.field !== undefined) expect(res.body.field).toBe(c.field);
    expect(count()).toEqual(before);
  });

  it('a 409 stores nothing new', async () => {
    const m = good();
    expect((await call(t.url, 'POST', '/v1/messages', { agent: 'pm', body: m })).status).toBe(201);
    const before = count();
    const res = await call(t.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { ...m, kind: 'signal' },
    });
    expect(res.status).toBe(409);
    expect(res.body.error).toBe('idempotency_conflict');
    expect(count()).toEqual(before);
  });

  it('a 413 on a chunked body without Content-Length stores nothing', async () => {
    const before = count();
    const big = JSON.stringify({ ...good(), payload: { x: 'y'.repeat(10_000) } });
    const stream = new ReadableStream({
      start(controller) {
        for (let i = 0; i < big.length; i += 1000)
          controller.enqueue(new TextEncoder().encode(big.slice(i, i + 1000)));
        controller.close();
      },
    });
    const res = await fetch(`${t.url}/v1/messages`, {
      method: 'POST',
      headers: { authorization: 'Bearer token-pm', 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: string }).error).toBe('payload_too_large');
    expect(count()).toEqual(before);
  });
});
