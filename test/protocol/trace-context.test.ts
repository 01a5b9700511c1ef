/**
 * W3C trace context on the message (CONTRACT.md, "Trace context"), tracing off: the envelope's
 * `traceparent`/`tracestate` are checked (400 naming the field), stored with the message, and
 * handed out with every delivery, replay, status and journey; a request's headers stand in for a
 * body without them; a malformed header is ignored. Through the adapter and through a sidecar.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  parseTraceparent,
  traceFromHeaders,
  traceOfMessage,
} from '../../src/protocol/trace-context.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, pollAs } from '../helpers/http.js';
import { startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';

const hex = (bytes: number) => randomBytes(bytes).toString('hex');
const traceparent = () => `00-${hex(16)}-${hex(8)}-01`;

describe('traceparent, as the W3C defines it', () => {
  it('takes version 00 with ids not all zero, and a later version with more fields', () => {
    const t = traceparent();
    expect(parseTraceparent(t)).toEqual({
      traceId: t.slice(3, 35),
      spanId: t.slice(36, 52),
      flags: 1,
    });
    expect(parseTraceparent(`cc-${hex(16)}-${hex(8)}-00-whatever`)).toBeDefined();
  });

  it.each([
    ['upper case', `00-${hex(16).toUpperCase()}-${hex(8)}-01`],
    ['a zero trace id', `00-${'0'.repeat(32)}-${hex(8)}-01`],
    ['a zero span id', `00-${hex(16)}-${'0'.repeat(16)}-01`],
    ['version ff', `ff-${hex(16)}-${hex(8)}-01`],
    ['version 00 with a fifth field', `00-${hex(16)}-${hex(8)}-01-extra`],
    ['a short trace id', `00-${hex(15)}-${hex(8)}-01`],
    ['no dashes', `00${hex(16)}${hex(8)}01`],
  ])('refuses %s', (_, value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it('ignores a malformed header, and a tracestate without a valid traceparent', () => {
    const t = traceparent();
    expect(traceFromHeaders({ traceparent: t, tracestate: 'a=1' })).toEqual({
      traceparent: t,
      tracestate: 'a=1',
    });
    expect(traceFromHeaders({ traceparent: 'garbage', tracestate: 'a=1' })).toBeUndefined();
    expect(traceFromHeaders({ traceparent: t, tracestate: 'x\u0001' })).toEqual({
      traceparent: t,
    });
    expect(traceFromHeaders({ traceparent: t, tracestate: ['a=1', 'b=2'] })).toEqual({
      traceparent: t,
      tracestate: 'a=1,b=2',
    });
  });

  it('reads a stored message head, not a payload that names a traceparent', () => {
    const t = traceparent();
    const head = `{"message_id":"m","hop":0,"traceparent":"${t}","tracestate":"k=\\"v\\"","payload":{"traceparent":"x"}}`;
    expect(traceOfMessage(head)).toEqual({ traceparent: t, tracestate: 'k="v"' });
    expect(traceOfMessage('{"message_id":"m","payload":{"traceparent":"x"}}')).toBeUndefined();
  });
});

describe('a message carries its creation context (tracing off)', () => {
  let a: TestAdapter;
  let pm: TestSidecar;

  beforeAll(async () => {
    a = await startTestAdapter();
    pm = await startTestSidecar('pm', a.url);
  });
  afterAll(async () => {
    await pm?.stop();
    await a?.stop();
  });

  const send = (
    url: string,
    body: object,
    opts: { agent?: string; headers?: Record<string, string> } = {},
  ) =>
    call(url, 'POST', '/v1/messages', {
      ...opts,
      body: { idempotency_key: randomUUID(), to: 'product', kind: 'status', ...body },
    });

  it('is stored from the envelope and handed out with the delivery, the status, the journey and the replay', async () => {
    const t = traceparent();
    const sent = await send(a.url, { traceparent: t, tracestate: 'vendor=1' }, { agent: 'pm' });
    expect(sent.status).toBe(201);
    const [d] = (await pollAs(a.url, 'qa', { max: 1 })) as {
      delivery_id: number;
      message: Record<string, unknown>;
    }[];
    expect(d!.message).toMatchObject({
      message_id: sent.body.message_id,
      traceparent: t,
      tracestate: 'vendor=1',
    });
    const id = sent.body.message_id as string;
    const status = await call(a.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
    expect(status.body.message).toMatchObject({ traceparent: t, tracestate: 'vendor=1' });
    const journey = await call(a.url, 'GET', `/v1/messages/${id}/journey`, { agent: 'pm' });
    expect(journey.body.message).toMatchObject({ traceparent: t });
    const seq = sent.body.channel_sequence_id as number;
    const replay = await call(
      a.url,
      'GET',
      `/v1/channels/product/messages?after=${seq - 1}&limit=1`,
      {
        agent: 'qa',
      },
    );
    expect(replay.body.messages[0]).toMatchObject({ message_id: id, traceparent: t });
    const thread = await call(a.url, 'GET', `/v1/threads/${id}/messages`, {
      agent: 'orchestrator',
    });
    expect(thread.body.messages[0]).toMatchObject({ message_id: id, traceparent: t });
    // a dead letter hands it out too
    const nack = await call(a.url, 'POST', '/v1/nacks', {
      agent: 'qa',
      body: { delivery_ids: [d!.delivery_id], retry: false, reason: 'no' },
    });
    expect(nack.status).toBe(200);
    const dead = await call(a.url, 'GET', '/v1/dead-letters?limit=100', { agent: 'orchestrator' });
    const letter = (dead.body.dead_letters as { message: { message_id: string } }[]).find(
      (x) => x.message.message_id === id,
    );
    expect(letter?.message).toMatchObject({ traceparent: t, tracestate: 'vendor=1' });
  });

  it('takes the request headers when the body has none; the body wins over them; a bad header is ignored', async () => {
    const header = traceparent();
    const own = traceparent();
    const byHeader = await send(
      a.url,
      {},
      { agent: 'pm', headers: { traceparent: header, tracestate: 'h=1' } },
    );
    const byBody = await send(
      a.url,
      { traceparent: own },
      { agent: 'pm', headers: { traceparent: header } },
    );
    const bad = await send(
      a.url,
      {},
      { agent: 'pm', headers: { traceparent: 'not-a-traceparent' } },
    );
    expect([byHeader.status, byBody.status, bad.status]).toEqual([201, 201, 201]);
    const got = (await pollAs(a.url, 'engineering', { max: 10 })) as {
      message: Record<string, unknown>;
    }[];
    const of = (id: string) => got.find((d) => d.message.message_id === id)!.message;
    expect(of(byHeader.body.message_id)).toMatchObject({ traceparent: header, tracestate: 'h=1' });
    expect(of(byBody.body.message_id).traceparent).toBe(own);
    expect(of(bad.body.message_id)).not.toHaveProperty('traceparent');
  });

  it.each([
    ['traceparent', { traceparent: '00-abc-def-01' }],
    ['traceparent', { traceparent: `00-${'0'.repeat(32)}-${hex(8)}-01` }],
    ['tracestate', { traceparent: traceparent(), tracestate: 'x'.repeat(513) }],
    ['tracestate', { tracestate: 'a=1' }],
  ])(
    'refuses a malformed %s field with a 400 naming it, at the adapter and at the sidecar',
    async (field, body) => {
      for (const [url, agent] of [
        [a.url, 'pm'],
        [pm.url, undefined],
      ] as const) {
        const r = await send(url, body, agent === undefined ? {} : { agent });
        expect(r.status).toBe(400);
        expect(r.body).toMatchObject({ error: 'invalid_envelope', field });
      }
    },
  );

  it("through a sidecar: the agent's header becomes the message's context, and the answer tells it", async () => {
    const header = traceparent();
    const r = await send(pm.url, {}, { headers: { traceparent: header } });
    expect(r.status).toBe(201);
    expect(r.body.traceparent).toBe(header);
    const status = await call(a.url, 'GET', `/v1/messages/${r.body.message_id}`, { agent: 'pm' });
    expect(status.body.message.traceparent).toBe(header);
  });

  it('a retry of the same key from another span is the same message (200, not 409)', async () => {
    const key = randomUUID();
    const body = { idempotency_key: key, to: 'product', kind: 'status' };
    const first = await call(a.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { ...body, traceparent: traceparent() },
    });
    const again = await call(a.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { ...body, traceparent: traceparent() },
    });
    expect([first.status, again.status]).toEqual([201, 200]);
    expect(again.body.message_id).toBe(first.body.message_id);
  });
});
