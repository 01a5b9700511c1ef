/**
 * POST /v1/messages forwards the bytes the agent sent (checked once, not serialized again:
 * docs/reference/operations.md), in front of a fake adapter that records each batch request's body:
 * - an envelope goes on byte for byte, its whitespace and number spelling kept;
 * - one without an idempotency key gets the key made for it as its last member;
 * - one naming `sender` goes on serialized without it, as every envelope did before;
 * - the adapter's bound is judged as before, on the envelope serialized: bytes that fit but
 *   serialize past it are refused at once (413, nothing sent), pretty-printed bytes past it
 *   that serialize within it go on serialized;
 * - what the envelope schema refuses is still refused here, and never reaches the adapter.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call } from '../helpers/http.js';
import { startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';

/** The adapter's largest message, as its GET /v1/me says. */
const MAX = 1024;
const batches: string[] = [];
let adapter: Server;
let sidecar: TestSidecar;

beforeAll(async () => {
  adapter = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const json = (status: number, body: object) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.url === '/health') return json(200, { status: 'ok' });
      if (req.url === '/v1/me')
        return json(200, { agent: 'pm', limits: { max_message_bytes: MAX } });
      if (req.url === '/v1/messages/batch') {
        const body = Buffer.concat(chunks).toString('utf8');
        batches.push(body);
        const { messages } = JSON.parse(body) as { messages: { idempotency_key: string }[] };
        return json(200, {
          results: messages.map((m, i) => ({
            status: 201,
            message_id: `m-${batches.length}-${i}`,
            channel: '@qa',
            channel_sequence_id: batches.length,
            idempotency_key: m.idempotency_key,
            duplicate: false,
          })),
        });
      }
      json(404, { error: 'not_found', message: req.url ?? '' });
    });
  });
  await new Promise<void>((r) => adapter.listen(0, '127.0.0.1', r));
  const { port } = adapter.address() as AddressInfo;
  sidecar = await startTestSidecar('pm', `http://127.0.0.1:${port}`);
});

afterAll(async () => {
  await sidecar?.stop();
  adapter?.close();
});

/** POSTs these bytes to the sidecar; answers its answer and the batch body the adapter got. */
async function send(raw: string) {
  const before = batches.length;
  const answer = await call(sidecar.url, 'POST', '/v1/messages', { raw });
  const forwarded = batches.slice(before);
  expect(forwarded.length).toBeLessThanOrEqual(1);
  return { ...answer, forwarded: forwarded[0] };
}

it('forwards the envelope byte for byte', async () => {
  const raw =
    '{ "idempotency_key": "k-1",\n  "to": "@qa", "kind": "status", "payload": {"n": 1.50e1, "s": "\\u00e9"} }';
  const r = await send(raw);
  expect(r.status).toBe(201);
  expect(r.body).toMatchObject({ status: 'delivered', idempotency_key: 'k-1' });
  expect(r.forwarded).toBe(`{"messages":[${raw}]}`);
});

it('gives an envelope without a key the key it made, as its last member', async () => {
  const raw = '{"to":"@qa","kind":"status","payload":{"n":2}}  \n';
  const r = await send(raw);
  expect(r.status).toBe(201);
  const key = r.body.idempotency_key as string;
  expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/);
  expect(r.forwarded).toBe(
    `{"messages":[{"to":"@qa","kind":"status","payload":{"n":2},"idempotency_key":"${key}"}]}`,
  );
});

it('sends an envelope that names its sender serialized, without it', async () => {
  const r = await send(
    '{"idempotency_key":"k-3", "sender":"pm", "to":"@qa", "kind":"status", "payload":{}}',
  );
  expect(r.status).toBe(201);
  expect(r.forwarded).toBe(
    '{"messages":[{"idempotency_key":"k-3","to":"@qa","kind":"status","payload":{}}]}',
  );
});

it("judges the adapter's bound on the envelope serialized, as before", async () => {
  // 9e15 is 4 bytes sent and 16 serialized: these bytes fit, the envelope would not
  const nums = Array(60).fill('9e15').join(',');
  const grows = `{"idempotency_key":"k-4","to":"@qa","kind":"status","payload":{"v":[${nums}]}}`;
  expect(Buffer.byteLength(grows)).toBeLessThan(MAX);
  const refused = await send(grows);
  expect(refused.status).toBe(413);
  expect(refused.body).toMatchObject({ error: 'payload_too_large' });
  expect(refused.forwarded).toBeUndefined();

  // pretty-printed past the bound, within it serialized: it goes on, serialized
  const pretty = JSON.stringify(
    { idempotency_key: 'k-5', to: '@qa', kind: 'status', payload: { v: Array(100).fill(1) } },
    null,
    8,
  );
  expect(Buffer.byteLength(pretty)).toBeGreaterThan(MAX);
  const sent = await send(pretty);
  expect(sent.status).toBe(201);
  expect(sent.forwarded).toBe(`{"messages":[${JSON.stringify(JSON.parse(pretty))}]}`);
});

it('still refuses what the envelope schema refuses, before anything is sent', async () => {
  for (const raw of [
    '{"idempotency_key":"k-6","to":"@qa","kind":"status","payload":{},"extra":1}',
    '{"to":"@qa","kind":"task/request","payload":{"task_id":"T-1"}}',
    '{}',
    '[]',
  ]) {
    const r = await send(raw);
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ error: 'invalid_envelope' });
    expect(r.forwarded).toBeUndefined();
  }
});
