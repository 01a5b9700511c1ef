/**
 * Random bodies thrown at the write path (POST /v1/messages and /v1/messages/batch), from fixed
 * seeds so that a failure repeats: envelope-like objects, broken JSON and bytes, payloads nested
 * deep, bodies around and past the size bounds, odd keys and numbers. Whatever arrives, the
 * answer is a documented 2xx or 4xx with a JSON error body, never a 5xx, and the adapter stays
 * up. Valid envelopes with odd payloads are stored and read back exactly.
 *
 * Object.prototype's names go in as kinds, priorities, channels and payload keys: kind
 * "constructor" was once a 500.
 *
 * 3,300 bodies in all, about 40 s on two cores at load 12 (sync=normal: fsyncs are not what is
 * tested).
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../src/protocol/errors.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { objectText, PROTO_NAMES, protoName } from '../helpers/bad-input.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

/** Small bounds, so that "around and past the bound" is cheap to send: 8 KiB, a batch 800 KiB. */
const MAX_MESSAGE = 8192;
const SEED = 20261130;

let t: TestAdapter;
beforeAll(async () => {
  t = await startTestAdapter({ maxMessageBytes: String(MAX_MESSAGE), sync: 'normal' });
});
afterAll(async () => {
  await t.stop();
});

const documented = new Set(Object.keys(ERRORS));
const PATHS = ['/v1/messages', '/v1/messages/batch'] as const;

async function post(
  path: string,
  body: string | Uint8Array,
): Promise<{ status: number; body: Json }> {
  const res = await fetch(t.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' },
    body,
  });
  const text = await res.text();
  let parsed: Json = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, body: parsed };
}

/** The property every body must keep: no 5xx, a documented code on every refusal. */
async function answersWell(path: string, body: string | Uint8Array): Promise<void> {
  const res = await post(path, body);
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
  if (res.status >= 400) expect(documented.has(res.body.error)).toBe(true);
  if (path.endsWith('batch') && res.status === 200) {
    for (const r of res.body.results) {
      expect(r.status, JSON.stringify(r)).toBeLessThan(500);
      if (r.status >= 400) expect(documented.has(r.error)).toBe(true);
    }
  }
}

const names = fc.oneof(
  fc.constantFrom(
    'product',
    'all-agents',
    'platform',
    '@qa',
    '@pm',
    '@nobody',
    '@adapter',
    'nope',
    '',
    '@',
    '@@x',
  ),
  // a channel or agent named after an Object.prototype member: none of the topology's
  protoName,
  protoName.map((n) => `@${n}`),
);
const envelopeLike = fc.record(
  {
    idempotency_key: fc.oneof(fc.uuid(), fc.string(), fc.integer(), fc.constant(null)),
    to: fc.oneof(names, fc.string(), fc.integer()),
    kind: fc.oneof(
      fc.constantFrom('task/request', 'task/result', 'status', 'alert/x', 'A/B'),
      fc.string(),
      // "constructor" is a kind like any other (it was a 500: PAYLOAD_SCHEMAS on a plain object)
      protoName,
    ),
    priority: fc.oneof(fc.constantFrom('normal', 'critical'), fc.anything(), protoName),
    reply_to_sequence_id: fc.oneof(fc.integer(), fc.double(), fc.constant(null), fc.string()),
    payload: fc.oneof(fc.object(), fc.anything()),
    sender: fc.oneof(fc.constantFrom('pm', 'qa'), fc.anything()),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);

/** A well-formed envelope's text with `payload` spliced in as raw JSON text. */
const envelopeText = (payloadText: string, to = '@qa') =>
  `{"idempotency_key":"${randomUUID()}","to":"${to}","kind":"status","payload":${payloadText}}`;

it('never answers 5xx to envelope-like values, any JSON or any text', {
  timeout: 60_000,
}, async () => {
  const body = fc.oneof(
    envelopeLike.map((e) => JSON.stringify(e)),
    fc.json(),
    fc.string(),
    fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1')),
    fc.array(envelopeLike, { maxLength: 5 }).map((messages) => JSON.stringify({ messages })),
  );
  await fc.assert(
    fc.asyncProperty(body, fc.constantFrom(...PATHS), (raw, path) => answersWell(path, raw)),
    { numRuns: 1200, seed: SEED },
  );
});

it('never answers 5xx to broken JSON: cut, spliced, bytes that are not UTF-8', {
  timeout: 60_000,
}, async () => {
  const valid = fc.constant(null).map(() => envelopeText('{"a":[1,{"b":"c"}]}'));
  const broken = fc.oneof(
    // a valid envelope cut anywhere
    fc.tuple(valid, fc.nat()).map(([text, at]) => text.slice(0, at % text.length)),
    // a valid envelope with one character replaced or inserted
    fc
      .tuple(
        valid,
        fc.nat(),
        fc.constantFrom('{', '}', '[', ']', '"', ',', ':', '\\', '\u0000', ' '),
      )
      .map(
        ([text, at, c]) => text.slice(0, at % text.length) + c + text.slice((at % text.length) + 1),
      ),
    // raw bytes, valid UTF-8 or not
    fc.uint8Array({ minLength: 0, maxLength: 300 }),
    // a valid envelope with stray bytes inside a string
    fc
      .uint8Array({ minLength: 1, maxLength: 8 })
      .map((b) => Buffer.concat([Buffer.from(envelopeText('{"s":"')), b, Buffer.from('"}}')])),
    fc.constantFrom(
      '',
      ' ',
      'null',
      '[]',
      '{}',
      '"x"',
      '0',
      'true',
      '\uFEFF{}',
      '{"messages":null}',
    ),
  );
  await fc.assert(
    fc.asyncProperty(broken, fc.constantFrom(...PATHS), (raw, path) =>
      answersWell(
        path,
        path.endsWith('batch') && typeof raw === 'string' && raw.startsWith('{"idem')
          ? `{"messages":[${raw}]}`
          : raw,
      ),
    ),
    { numRuns: 800, seed: SEED + 1 },
  );
});

it('never answers 5xx to deep nesting or bodies around and past the size bounds', {
  timeout: 60_000,
}, async () => {
  const open = fc.constantFrom('[', '{"a":');
  const deep = fc.oneof(
    // nested within a payload, balanced: deeper than 64 is a 400, never a stack overflow
    fc
      .tuple(fc.integer({ min: 1, max: 4000 }), open)
      .map(([d, o]) => envelopeText(`{"x":${o.repeat(d)}1${(o === '[' ? ']' : '}').repeat(d)}}`)),
    // unbalanced: not JSON at all
    fc.tuple(fc.integer({ min: 1, max: 8000 }), open).map(([d, o]) => envelopeText(o.repeat(d))),
    // deep where the schema expects a string
    fc.integer({ min: 1, max: 3000 }).map((d) => `{"to":${'['.repeat(d)}${']'.repeat(d)}}`),
  );
  const ascii = fc.integer({ min: MAX_MESSAGE - 200, max: MAX_MESSAGE + 200 });
  const huge = fc.oneof(
    // a string payload around the bound, in one-, two- and four-byte characters
    fc
      .tuple(ascii, fc.constantFrom('x', 'é', '😀'))
      .map(([n, c]) => envelopeText(`{"s":"${c.repeat(Math.floor(n / Buffer.byteLength(c)))}"}`)),
    // many keys
    fc
      .integer({ min: 100, max: 3000 })
      .map((n) =>
        envelopeText(`{${Array.from({ length: n }, (_, i) => `"k${i}":${i}`).join(',')}}`),
      ),
    // a long array of numbers
    fc.integer({ min: 100, max: 5000 }).map((n) => envelopeText(`{"a":[${'1,'.repeat(n)}1]}`)),
  );
  // batches: 1 to 120 items, some of them large or deep
  const item = fc.oneof(
    { weight: 4, arbitrary: fc.constant(null).map(() => envelopeText('{}')) },
    { weight: 1, arbitrary: huge },
    { weight: 1, arbitrary: deep },
  );
  const batch = fc
    .array(item, { minLength: 1, maxLength: 120 })
    .map((items) => `{"messages":[${items.join(',')}]}`);
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(
        fc
          .tuple(fc.oneof(deep, huge), fc.constantFrom(...PATHS))
          .map(([b, p]) =>
            p === '/v1/messages' ? { path: p, raw: b } : { path: p, raw: `{"messages":[${b}]}` },
          ),
        batch.map((raw) => ({ path: '/v1/messages/batch', raw })),
      ),
      ({ path, raw }) => answersWell(path, raw),
    ),
    { numRuns: 400, seed: SEED + 2 },
  );
});

const protoEnvelope = fc.record({
  to: fc.oneof(
    fc.constantFrom('@qa', 'product'),
    protoName,
    protoName.map((n) => `@${n}`),
  ),
  kind: fc.oneof(fc.constantFrom('status', 'task/update'), protoName),
  priority: fc.option(fc.oneof(fc.constantFrom('normal', 'critical'), protoName)),
  payload: fc.array(fc.tuple(protoName, fc.oneof(fc.string(), fc.integer())), { maxLength: 4 }),
});
type ProtoEnvelope = typeof protoEnvelope extends fc.Arbitrary<infer T> ? T : never;

const protoText = (e: ProtoEnvelope) =>
  objectText([
    ['idempotency_key', randomUUID()],
    ['to', e.to],
    ['kind', e.kind],
    ...(e.priority === null ? [] : [['priority', e.priority] as const]),
    ['payload', objectText([['task_id', 'T-1'], ...e.payload])],
  ]).text;

/** Good but for prototype names in its kind ("constructor") or payload keys: to be stored. */
const storable = (e: ProtoEnvelope) =>
  ['@qa', 'product'].includes(e.to) &&
  /^[a-z]+$/.test(e.kind) &&
  (e.priority === null || e.priority === 'normal' || e.priority === 'critical');

it('answers Object.prototype names as a kind, priority, to or payload key as any other string', {
  timeout: 60_000,
}, async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(protoEnvelope, { minLength: 1, maxLength: 4 }), async (list) => {
      const [one] = list;
      if (list.length === 1 && one !== undefined) {
        const res = await post('/v1/messages', protoText(one));
        expect(res.status, JSON.stringify([one, res.body])).toBeLessThan(500);
        if (storable(one)) expect(res.status, JSON.stringify([one, res.body])).toBe(201);
        return;
      }
      const res = await post(
        '/v1/messages/batch',
        `{"messages":[${list.map(protoText).join(',')}]}`,
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      list.forEach((e, i) => {
        const r = res.body.results[i];
        expect(r.status, JSON.stringify([e, r])).toBeLessThan(500);
        if (storable(e)) expect(r.status, JSON.stringify([e, r])).toBe(201);
      });
    }),
    { numRuns: 300, seed: SEED + 4 },
  );
});

/** JSON values whose numbers are all exact doubles, with odd keys (__proto__ among them). */
const oddKey = fc.oneof(
  fc.constantFrom(...PROTO_NAMES, 'prototype', '', '\u0000', '\ud800', 'é', '😀', 'a.b'),
  fc.string({ maxLength: 8 }),
);
const exactNumber = fc.oneof(
  fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }),
  fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e15, max: 1e15 }),
  fc.constantFrom(0, 0.1, 5e-324, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER),
);
const { value: oddValue } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    exactNumber,
    fc.string({ unit: 'binary', maxLength: 20 }),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    tie('object'),
  ),
  object: fc.array(fc.tuple(oddKey, tie('value')), { maxLength: 5 }).map(objectText),
}));

const oddPayload = fc
  .array(fc.tuple(oddKey, oddValue), { maxLength: 6 })
  .map((entries) => objectText(entries).text);

it('stores a valid envelope with an odd payload and reads it back exactly', {
  timeout: 60_000,
}, async () => {
  await fc.assert(
    fc.asyncProperty(oddPayload, async (payloadText) => {
      const expected = JSON.stringify(JSON.parse(payloadText));
      const body = envelopeText(payloadText);
      const res = await post('/v1/messages', body);
      if (Buffer.byteLength(body) > MAX_MESSAGE) {
        expect(res.status).toBe(413);
        return;
      }
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      const back = await fetch(`${t.url}/v1/messages/${res.body.message_id}`, {
        headers: { authorization: `Bearer ${tokenOf('pm')}` },
      });
      const stored = JSON.parse(await back.text()).message.payload;
      // own keys, __proto__ included, in their order, with every value as sent
      expect(JSON.stringify(stored)).toBe(expected);
    }),
    { numRuns: 600, seed: SEED + 3 },
  );
});

it('is alive and serving after all of it', async () => {
  expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  await sendAs(t.url, 'pm', 'product');
  const me = await call(t.url, 'GET', '/v1/me', { agent: 'qa' });
  expect(me.status).toBe(200);
});
