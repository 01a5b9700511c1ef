/**
 * GET /v1/me: who the caller is, its channels, where alerts go, and the limits a sidecar may
 * refuse against at once; and the payload depth limit it names (max_depth), which the write
 * path enforces with a 400, never a 500.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { AGENTS, CHANNELS, sha256Hex, tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const me = (agent?: string) => call(t!.url, 'GET', '/v1/me', { agent });

/** A payload whose objects nest `depth` levels (the payload itself is level 1). */
function nested(depth: number): Record<string, unknown> {
  let v: Record<string, unknown> = { leaf: true };
  for (let i = 1; i < depth; i++) v = { a: v };
  return v;
}

describe('GET /v1/me', () => {
  it('answers the caller, the channels it is a member of with their members, alerts_to and the limits', async () => {
    t = await startTestAdapter();
    const qa = await me('qa');
    expect(qa.status).toBe(200);
    expect(qa.body).toEqual({
      agent: 'qa',
      channels: [
        { name: 'all-agents', members: [...CHANNELS['all-agents']!] },
        { name: 'product', members: [...CHANNELS.product!] },
      ],
      alerts_to: 'orchestrator',
      limits: { max_message_bytes: 262_144, max_batch: 100, max_depth: 64 },
    });
    const orchestrator = await me('orchestrator');
    expect(orchestrator.body.agent).toBe('orchestrator');
    expect(orchestrator.body.channels.map((c: Json) => c.name)).toEqual(['all-agents', 'platform']);
    expect(orchestrator.body.channels[1]).toEqual({ name: 'platform', members: ['orchestrator'] });
  });

  it('an agent in no group channel gets an empty list', async () => {
    const topology = {
      agents: [...AGENTS, 'loner'].map((id) => ({
        id,
        token_sha256: sha256Hex(tokenOf(id)),
      })),
      channels: Object.entries(CHANNELS).map(([name, members]) => ({
        name,
        members: [...members],
      })),
      alerts_to: 'orchestrator',
    };
    t = await startTestAdapter({}, { topology });
    const r = await me('loner');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ agent: 'loner', channels: [], alerts_to: 'orchestrator' });
  });

  it('max_message_bytes follows AGW_MAX_MESSAGE_BYTES', async () => {
    t = await startTestAdapter({ maxMessageBytes: '65536' });
    expect((await me('pm')).body.limits).toEqual({
      max_message_bytes: 65_536,
      max_batch: 100,
      max_depth: 64,
    });
  });

  it('needs a token: 401 without one', async () => {
    t = await startTestAdapter();
    const r = await me();
    expect(r.status).toBe(401);
    expect(r.body.error).toBe('unauthorized');
  });
});

describe('payload depth', () => {
  const post = (payload: unknown) =>
    call(t!.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload },
    });

  it('a payload nested max_depth levels is taken; one level deeper is 400 invalid_envelope naming payload, and nothing is stored', async () => {
    t = await startTestAdapter();
    const { max_depth } = (await me('pm')).body.limits;
    expect((await post(nested(max_depth))).status).toBe(201);
    const deeper = await post(nested(max_depth + 1));
    expect(deeper.status).toBe(400);
    expect(deeper.body).toMatchObject({ error: 'invalid_envelope', field: 'payload' });
    expect(deeper.body.message).toContain(String(max_depth));
    const stored = await call(t.url, 'GET', '/v1/channels/%40qa/messages', { agent: 'qa' });
    expect(stored.body.messages).toHaveLength(1);
  });

  it('arrays count as levels too', async () => {
    t = await startTestAdapter();
    // the payload (1), then 64 arrays: 65 levels
    let v: unknown = 0;
    for (let i = 0; i < 64; i++) v = [v];
    const r = await post({ a: v });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ error: 'invalid_envelope', field: 'payload' });
  });

  it('a payload nested 100,000 levels deep is a 400, not a 500', async () => {
    t = await startTestAdapter();
    const depth = 100_000;
    const raw = `{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":{"a":${'['.repeat(depth)}${']'.repeat(depth)}}}`;
    const r = await call(t.url, 'POST', '/v1/messages', { agent: 'pm', raw });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ error: 'invalid_envelope', field: 'payload' });
    // and the adapter is fine afterwards
    expect((await post({})).status).toBe(201);
  });

  it('in a batch, an item nested past max_depth is refused alone with 400', async () => {
    t = await startTestAdapter();
    const item = (payload: string) =>
      `{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":${payload}}`;
    let deep = '{"a":0}';
    for (let i = 0; i < 64; i++) deep = `{"a":${deep}}`;
    const r = await call(t.url, 'POST', '/v1/messages/batch', {
      agent: 'pm',
      raw: `{"messages":[${item('{}')},${item(deep)}]}`,
    });
    expect(r.status).toBe(200);
    expect(r.body.results.map((x: Json) => [x.status, x.error, x.field])).toEqual([
      [201, undefined, undefined],
      [400, 'invalid_envelope', 'payload'],
    ]);
  });

  // postBatch once measured each item with JSON.stringify before its depth was checked: a deep
  // item threw a RangeError there and failed the whole batch with a retryable 500
  it('in a batch, an item nested 5,000 levels deep is refused alone with 400, not a 500', async () => {
    t = await startTestAdapter();
    const depth = 5000;
    const item = (payload: string) =>
      `{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":${payload}}`;
    const r = await call(t.url, 'POST', '/v1/messages/batch', {
      agent: 'pm',
      raw: `{"messages":[${item('{}')},${item(`{"a":${'['.repeat(depth)}${']'.repeat(depth)}}`)}]}`,
    });
    expect(r.status).toBe(200);
    expect(r.body.results.map((x: Json) => [x.status, x.error])).toEqual([
      [201, undefined],
      [400, 'invalid_envelope'],
    ]);
  });
});
