/**
 * A POST with a body is JSON (docs/reference/adapter-api.md: 415 for one that is not): the adapter
 * once stored a message posted as `text/plain`. Every POST to an endpoint that takes a body, and
 * any other POST that carries one, must say `Content-Type: application/json` (a parameter such as
 * `; charset=utf-8` is fine); anything else is 415 `not_json` before the body is read, and nothing
 * of it is stored or applied. The token is checked first: no token is still 401.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, pollAs, sendAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

/** A POST with exactly these headers: `type` undefined sends no Content-Type at all. */
async function post(path: string, body: string, type: string | undefined, agent = 'pm') {
  const headers: Record<string, string> = { authorization: `Bearer ${tokenOf(agent)}` };
  if (type !== undefined) headers['content-type'] = type;
  // bytes, not a string: fetch would add `text/plain;charset=UTF-8` to a string of its own accord
  const res = await fetch(t!.url + path, { method: 'POST', headers, body: Buffer.from(body) });
  return { status: res.status, body: (await res.json()) as { error?: string } };
}

const NOT_JSON = [
  undefined,
  'text/plain',
  'text/plain; charset=utf-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'text/json',
  'application/jsonp',
  'application/merge-patch+json',
  '',
];
const envelope = () => JSON.stringify({ idempotency_key: randomUUID(), to: '@qa', kind: 'status' });

it('refuses a message or a batch that is not application/json with 415, storing nothing', async () => {
  t = await startTestAdapter();
  for (const type of NOT_JSON) {
    const one = await post('/v1/messages', envelope(), type);
    expect([one.status, one.body.error], String(type)).toEqual([415, 'not_json']);
    const batch = await post('/v1/messages/batch', `{"messages":[${envelope()}]}`, type);
    expect([batch.status, batch.body.error], String(type)).toEqual([415, 'not_json']);
  }
  expect(await pollAs(t.url, 'qa')).toEqual([]);
  const replay = await call(t.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
  expect(replay.body.messages).toEqual([]);
});

it('takes application/json with parameters and in any case', async () => {
  t = await startTestAdapter();
  for (const type of [
    'application/json',
    'application/json; charset=utf-8',
    'Application/JSON;charset=UTF-8',
  ]) {
    expect((await post('/v1/messages', envelope(), type)).status, type).toBe(201);
  }
  expect(await pollAs(t.url, 'qa')).toHaveLength(3);
});

it('refuses acks, nacks, lease extensions and acks on a poll that are not JSON, applying none', async () => {
  t = await startTestAdapter();
  await sendAs(t.url, 'pm', '@qa');
  const [d] = await pollAs(t.url, 'qa');
  const ids = `{"delivery_ids":[${d.delivery_id}]}`;
  for (const [path, body] of [
    ['/v1/acks', ids],
    ['/v1/nacks', ids],
    ['/v1/leases', `{"delivery_ids":[${d.delivery_id}],"extend_ms":60000}`],
    ['/v1/inbox?wait=0', ids],
  ] as const) {
    for (const type of ['text/plain', undefined]) {
      const r = await post(path, body, type, 'qa');
      expect([r.status, r.body.error], `${path} ${type}`).toEqual([415, 'not_json']);
    }
  }
  // the delivery is as it was: leased to qa on its first attempt, with its first lease
  const status = await call(t.url, 'GET', `/v1/messages/${d.message.message_id}`, { agent: 'pm' });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'leased', attempts: 1 }),
  ]);
  const acked = await post('/v1/acks', ids, 'application/json', 'qa');
  expect(acked.body).toEqual({ acked: [d.delivery_id], dead_lettered: [], unknown: [] });
});

it('refuses a body that is not JSON on a POST that takes none; without one, it needs no type', async () => {
  t = await startTestAdapter();
  const plain = await post('/v1/heartbeat', 'hello', 'text/plain', 'qa');
  expect([plain.status, plain.body.error]).toEqual([415, 'not_json']);
  const bare = await fetch(`${t.url}/v1/heartbeat`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokenOf('qa')}` },
  });
  expect(bare.status).toBe(200);
});

it('checks the token first: no token is 401 whatever the type', async () => {
  t = await startTestAdapter();
  const res = await fetch(`${t.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'text/plain' },
    body: envelope(),
  });
  expect(res.status).toBe(401);
});
