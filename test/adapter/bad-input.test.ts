/**
 * Bad input is refused clearly or kept exactly, never altered and never a crash: a bad percent
 * escape in a path is a 400 naming the parameter; an integer JSON cannot carry exactly is a 400
 * naming the field; a `__proto__` key is kept, from the send to the inbox and replay; an effect
 * of a commit that throws is logged while its senders are answered and the adapter goes on.
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import type { Emergencies } from '../../src/journald/emergency.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

/** POST of a raw JSON text, as a client that never went through JSON.stringify would send. */
const postRaw = (url: string, path: string, raw: string) =>
  call(url, 'POST', path, { agent: 'pm', raw });

/** The inbox answer as text: what a reader's own parser would get. */
async function inboxText(url: string, agent: string): Promise<string> {
  const res = await fetch(`${url}/v1/inbox?max=100`, {
    headers: { authorization: `Bearer ${tokenOf(agent)}` },
  });
  expect(res.status).toBe(200);
  return await res.text();
}

it('answers a bad percent escape in a path with 400 naming the parameter', async () => {
  t = await startTestAdapter();
  for (const [path, field] of [
    ['/v1/channels/%E0%A4%A/messages', 'name'],
    ['/v1/channels/%/messages', 'name'],
    ['/v1/messages/%ZZ', 'message_id'],
  ] as const) {
    const r = await call(t.url, 'GET', path, { agent: 'qa' });
    expect([r.status, r.body.error, r.body.field]).toEqual([400, 'invalid_request', field]);
  }
  // a good escape of a name that does not exist is still a 404
  const r = await call(t.url, 'GET', '/v1/channels/%E0%A4%A4/messages', { agent: 'qa' });
  expect(r.status).toBe(404);
});

it('refuses an integer beyond 2^53−1 naming its field, and keeps every safe one exactly', async () => {
  t = await startTestAdapter();
  const env = (payload: string) =>
    `{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":${payload}}`;
  for (const [payload, field] of [
    ['{"order":{"id":9007199254740993}}', 'payload.order.id'],
    ['{"ids":[1,2,-9007199254740992]}', 'payload.ids.2'],
    ['{"n":1e300}', 'payload.n'],
    ['{"a":[{"b":-1e999}]}', 'payload.a.0.b'],
  ] as const) {
    const r = await postRaw(t.url, '/v1/messages', env(payload));
    expect([r.status, r.body.error, r.body.field]).toEqual([400, 'invalid_envelope', field]);
    expect(r.body.message).toMatch(/send it as a string/);
  }
  // in a batch, the item alone is refused
  const batch = await postRaw(
    t.url,
    '/v1/messages/batch',
    `{"messages":[${env('{"n":18446744073709551615}')},${env('{"n":1}')}]}`,
  );
  expect(batch.body.results.map((x: Json) => [x.status, x.field])).toEqual([
    [400, 'payload.n'],
    [201, undefined],
  ]);
  // the largest safe integers, and a fraction, come back digit for digit
  const safe = '{"max":9007199254740991,"min":-9007199254740991,"f":0.1}';
  expect((await postRaw(t.url, '/v1/messages', env(safe))).status).toBe(201);
  const text = await inboxText(t.url, 'qa');
  expect(text).toContain(`"payload":${safe}`);
});

it('refuses a body that is not UTF-8 rather than decode it with replacement characters', async () => {
  t = await startTestAdapter();
  const head = Buffer.from(
    `{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":{"s":"`,
  );
  const body = Buffer.concat([head, Buffer.from([0xc3, 0x28]), Buffer.from('"}}')]);
  const res = await fetch(`${t.url}/v1/messages`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' },
    body,
  });
  expect(res.status).toBe(400);
  expect(((await res.json()) as Json).error).toBe('invalid_json');
});

it('keeps __proto__ keys exactly, from the send to the inbox and replay', async () => {
  t = await startTestAdapter();
  const payload = '{"__proto__":{"admin":true},"a":{"__proto__":[1]},"b":2}';
  const key = randomUUID();
  const body = `{"idempotency_key":"${key}","to":"@qa","kind":"status","payload":${payload}}`;
  const sent = await postRaw(t.url, '/v1/messages', body);
  expect(sent.status).toBe(201);
  // through a batch too
  const batched = await postRaw(
    t.url,
    '/v1/messages/batch',
    `{"messages":[{"idempotency_key":"${randomUUID()}","to":"@qa","kind":"status","payload":${payload}}]}`,
  );
  expect(batched.body.results[0].status).toBe(201);

  const text = await inboxText(t.url, 'qa');
  const deliveries = JSON.parse(text).deliveries as Json[];
  expect(deliveries).toHaveLength(2);
  for (const d of deliveries) {
    const p = d.message.payload;
    expect(Object.keys(p)).toEqual(['__proto__', 'a', 'b']);
    expect(Object.getOwnPropertyDescriptor(p, '__proto__')?.value).toEqual({ admin: true });
    expect(Object.getOwnPropertyDescriptor(p.a, '__proto__')?.value).toEqual([1]);
  }
  expect(text.split(`"payload":${payload}`)).toHaveLength(3);
  const replay = await fetch(`${t.url}/v1/channels/%40qa/messages`, {
    headers: { authorization: `Bearer ${tokenOf('qa')}` },
  });
  expect((await replay.text()).split(`"payload":${payload}`)).toHaveLength(3);

  // the key is part of the body: the same idempotency key with another __proto__ is a conflict
  const other = body.replace('"admin":true', '"admin":false');
  expect((await postRaw(t.url, '/v1/messages', other)).status).toBe(409);
  expect((await postRaw(t.url, '/v1/messages', body)).status).toBe(200);
});

it('logs an effect that throws, answers its senders and goes on', { timeout: 30_000 }, async () => {
  const logged: Json[] = [];
  const logger = pino(
    { level: 'error' },
    { write: (line: string) => void logged.push(JSON.parse(line)) },
  );
  // the journald side of a dead-letter alert fails: it runs as an effect of the commit
  const emergencies = {
    raise: () => {
      throw new Error('journald exploded');
    },
  } as unknown as Emergencies;
  t = await startTestAdapter({}, { logger, emergencies });
  await sendAs(t.url, 'pm', '@qa');
  const [d] = (await call(t.url, 'GET', '/v1/inbox', { agent: 'qa' })).body.deliveries as Json[];
  // a nack with retry false dead-letters at once, which raises the alert in the same commit
  const nack = await call(t.url, 'POST', '/v1/nacks', {
    agent: 'qa',
    body: { delivery_ids: [d.delivery_id], retry: false },
  });
  expect(nack.status).toBe(200);
  expect(nack.body.nacked).toEqual([d.delivery_id]);
  expect(logged.some((l) => l.err?.message === 'journald exploded')).toBe(true);
  // the commits after it run and answer as usual
  await sendAs(t.url, 'pm', '@qa');
  const next = (await call(t.url, 'GET', '/v1/inbox', { agent: 'qa' })).body.deliveries;
  expect(next).toHaveLength(1);
  expect((await call(t.url, 'GET', '/health')).status).toBe(200);
});

it('answers every op of a group whose commit listener throws, runs the others, and reports it', async () => {
  const { dir, cleanup } = tempDir('agw-listener-');
  const store = new SqliteStore(join(dir, 's.db'));
  try {
    await store.ensureChannels(['@qa']);
    const gc = new GroupCommit(store);
    const seen: string[] = [];
    const reported: [unknown, string][] = [];
    gc.on('commit', () => {
      throw new Error('an effect failed');
    });
    gc.on('commit', () => seen.push('second listener'));
    gc.on('listener:error', (err, event) => reported.push([err, event]));
    const key = randomUUID();
    const draft = {
      sender: 'pm',
      idempotencyKey: key,
      fingerprint: createHash('sha256').update(key).digest(),
      channel: '@qa',
      kind: 'status',
      priority: 'normal' as const,
      replyTo: null,
      payloadJson: '{}',
      receivedAt: Date.now(),
      recipients: ['qa'],
    };
    // two ops of one group: both answered although the listener threw inside flush()
    const [sent, beat] = await Promise.all([
      gc.run({ op: 'append', drafts: [draft] }),
      gc.run({ op: 'heartbeat', agent: 'qa', now: Date.now() }),
    ]);
    expect(sent[0]?.status).toBe(201);
    expect(beat).toEqual({ pending: 1, critical_pending: 0 });
    expect(seen).toEqual(['second listener']);
    expect(reported.map(([e, ev]) => [(e as Error).message, ev])).toEqual([
      ['an effect failed', 'commit'],
    ]);
  } finally {
    await store.close();
    cleanup();
  }
});
