/**
 * Random bodies thrown at the write path: whatever arrives, the answer is a documented 2xx or
 * 4xx with a JSON error body, never a 5xx, and the server stays up.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../src/protocol/errors.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';

let t: TestAdapter;
beforeAll(async () => {
  t = await startTestAdapter({ maxMessageBytes: '8192' });
});
afterAll(async () => {
  await t.stop();
});

const names = fc.constantFrom(
  'product',
  'all-agents',
  'platform',
  '@qa',
  '@pm',
  '@nobody',
  'nope',
  '',
  '@',
  '@@x',
);
const envelopeLike = fc.record(
  {
    idempotency_key: fc.oneof(fc.uuid(), fc.string(), fc.integer(), fc.constant(null)),
    to: fc.oneof(names, fc.string(), fc.integer()),
    kind: fc.oneof(
      fc.constantFrom('task/request', 'task/result', 'status', 'alert/x', 'A/B'),
      fc.string(),
    ),
    priority: fc.oneof(fc.constantFrom('normal', 'critical'), fc.anything()),
    reply_to_sequence_id: fc.oneof(fc.integer(), fc.double(), fc.constant(null), fc.string()),
    payload: fc.oneof(fc.object(), fc.anything()),
    sender: fc.oneof(fc.constantFrom('pm', 'qa'), fc.anything()),
    extra: fc.anything(),
  },
  { requiredKeys: [] },
);
const body = fc.oneof(
  envelopeLike.map((e) => JSON.stringify(e)),
  fc.json(),
  fc.string(),
  fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1')),
  fc.array(envelopeLike, { maxLength: 5 }).map((messages) => JSON.stringify({ messages })),
);
const documented = new Set(Object.keys(ERRORS));

it('never answers 5xx, whatever the body', { timeout: 120_000 }, async () => {
  await fc.assert(
    fc.asyncProperty(
      body,
      fc.constantFrom('/v1/messages', '/v1/messages/batch'),
      async (raw, path) => {
        const res = await call(t.url, 'POST', path, { agent: 'pm', raw });
        expect(res.status).toBeLessThan(500);
        if (res.status >= 400) expect(documented.has(res.body.error)).toBe(true);
        if (path.endsWith('batch') && res.status === 200) {
          for (const r of res.body.results) expect(r.status).toBeLessThan(500);
        }
      },
    ),
    { numRuns: 600 },
  );
  expect((await call(t.url, 'GET', '/health')).status).toBe(200);
});
