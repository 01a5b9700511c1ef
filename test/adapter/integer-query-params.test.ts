/**
 * Integer query parameters (`wait`, `max`, `after`, `limit`) are plain decimal digits within their
 * bounds (docs/reference/adapter-api.md): Number() with trim took `wait=0x10` (a 16 s wait), `1e1`
 * and `5 `. Anything else is 400 `invalid_request` naming the parameter, at the adapter and at the
 * sidecar (the same intParam).
 */
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** Each spelled as it goes into the URL. Each is refused before anything is read or leased. */
const NOT_DIGITS = [
  '0x10',
  '1e1',
  '5%20',
  '%205',
  '+5',
  '-0',
  '5.0',
  '0b1',
  '0o7',
  '',
  '%EF%BC%95', // a fullwidth 5
  'Infinity',
  '1_0',
  '99999999999999999999', // 20 digits: past 2^53 and any bound
];

it('refuses every integer parameter that is not plain digits, naming it, at the adapter and the sidecar', {
  timeout: 60_000,
}, async () => {
  const t = await startTestAdapter();
  stops.push(t.stop);
  const sidecar = await startTestSidecar('qa', t.url);
  stops.push(sidecar.stop);
  for (const raw of NOT_DIGITS) {
    for (const [url, agent] of [
      [t.url, 'qa'],
      [sidecar.url, undefined],
    ] as const) {
      for (const [path, field] of [
        [`/v1/inbox?wait=${raw}`, 'wait'],
        [`/v1/inbox?max=${raw}`, 'max'],
        [`/v1/channels/product/messages?after=${raw}`, 'after'],
        [`/v1/channels/product/messages?limit=${raw}`, 'limit'],
      ] as const) {
        const r = await call(url, 'GET', path, { agent });
        expect([r.status, r.body.error, r.body.field], `${url}${path}`).toEqual([
          400,
          'invalid_request',
          field,
        ]);
      }
    }
  }
  const dead = await call(t.url, 'GET', '/v1/dead-letters?limit=1e1', { agent: 'orchestrator' });
  expect([dead.status, dead.body.field]).toEqual([400, 'limit']);
});

it('takes plain digits within bounds, leading zeros too', async () => {
  const t = await startTestAdapter();
  stops.push(t.stop);
  for (const path of [
    '/v1/inbox?wait=0&max=100',
    '/v1/inbox?wait=00&max=010',
    '/v1/channels/product/messages?after=9007199254740991&limit=1000',
  ]) {
    expect((await call(t.url, 'GET', path, { agent: 'qa' })).status, path).toBe(200);
  }
  const over = await call(t.url, 'GET', '/v1/channels/product/messages?after=9007199254740992', {
    agent: 'qa',
  });
  expect([over.status, over.body.field]).toEqual([400, 'after']);
});
