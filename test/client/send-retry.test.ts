/**
 * send() retries an answer that may change (no answer, 503, 429) with one idempotency key for
 * all its tries, so a retry never makes a second message; a refusal for good is not retried.
 * A proxy in front of a real adapter plays the failures and records every try.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { GatewayClient, GatewayClientError } from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

/** What the proxy does with one try of POST /v1/messages. */
type Play =
  | 'forward' // pass it on and back
  | 'forward-then-drop' // pass it on (the adapter stores it), then cut the connection unanswered
  | { status: number; retryAfter?: string }; // answer this error itself

interface Try {
  key: string;
  at: number;
}

interface Proxy {
  url: string;
  tries: Try[];
  close: () => Promise<void>;
}

let t: TestAdapter | undefined;
let proxy: Proxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await t?.stop();
  t = undefined;
});

/** A proxy to `target`; the nth try of POST /v1/messages gets plays[n] (the last one after). */
async function startProxy(target: string, plays: Play[]): Promise<Proxy> {
  const tries: Try[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let play: Play = 'forward';
      if (req.method === 'POST' && req.url === '/v1/messages') {
        tries.push({
          key: (JSON.parse(body) as { idempotency_key: string }).idempotency_key,
          at: Date.now(),
        });
        play = plays[Math.min(tries.length, plays.length) - 1]!;
      }
      if (typeof play === 'object') {
        res.writeHead(play.status, {
          'content-type': 'application/json',
          ...(play.retryAfter === undefined ? {} : { 'retry-after': play.retryAfter }),
        });
        res.end(JSON.stringify({ error: 'overloaded', message: 'played by the test proxy' }));
        return;
      }
      const answer = await fetch(target + req.url, {
        method: req.method!,
        headers: {
          'content-type': 'application/json',
          authorization: req.headers.authorization ?? '',
        },
        ...(req.method === 'GET' ? {} : { body }),
      });
      const text = await answer.text();
      if (play === 'forward-then-drop') {
        req.socket.destroy(); // stored, but the client never hears so
        return;
      }
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(text);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    tries,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

it('a send whose answer was lost, then refused with 503, is tried again with the same key and stored once', {
  timeout: 30_000,
}, async () => {
  t = await startTestAdapter();
  proxy = await startProxy(t.url, [
    'forward-then-drop',
    { status: 503, retryAfter: '1' },
    'forward',
  ]);
  const pm = new GatewayClient({ url: proxy.url, token: tokenOf('pm'), retryBaseMs: 1 });

  const sent = await pm.send({
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-1', description: 'once' },
  });

  expect(proxy.tries).toHaveLength(3);
  const [key] = proxy.tries.map((x) => x.key);
  expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  expect(proxy.tries.map((x) => x.key)).toEqual([key, key, key]);
  // the first try was stored: the last one is its duplicate, not a second message
  expect(sent).toMatchObject({ status: 'delivered', duplicate: true });
  // Retry-After: 1 was honoured (a lower bound only; the backoff alone is 1 ms here)
  expect(proxy.tries[2]!.at - proxy.tries[1]!.at).toBeGreaterThanOrEqual(1000);

  const inbox = await call(t.url, 'GET', '/v1/inbox?wait=0&max=10', { agent: 'qa' });
  expect(inbox.status).toBe(200);
  expect(inbox.body.deliveries).toHaveLength(1);
  expect(inbox.body.deliveries[0].message.idempotency_key).toBe(key);

  // the key is made once per send() call, not once per client
  await pm.send({ to: '@qa', kind: 'status' });
  expect(proxy.tries).toHaveLength(4);
  expect(proxy.tries[3]!.key).not.toBe(key);
});

it('retries stop after sendAttempts, and keep a key the caller gave', async () => {
  t = await startTestAdapter();
  proxy = await startProxy(t.url, [{ status: 503 }]);
  const pm = new GatewayClient({
    url: proxy.url,
    token: tokenOf('pm'),
    sendAttempts: 3,
    retryBaseMs: 1,
  });
  const err = await pm
    .send({ to: '@qa', kind: 'status', idempotency_key: 'mine-1' })
    .catch((e: unknown) => e);
  expect(err).toBeInstanceOf(GatewayClientError);
  expect(err).toMatchObject({ status: 503, code: 'overloaded', retryable: true });
  expect(proxy.tries.map((x) => x.key)).toEqual(['mine-1', 'mine-1', 'mine-1']);
  const pending = await call(t.url, 'POST', '/v1/heartbeat', { agent: 'qa', body: {} });
  expect(pending.body.pending).toBe(0);
});

it('a refusal for good, or a Retry-After past retryMaxMs, is thrown after one try', async () => {
  t = await startTestAdapter();
  proxy = await startProxy(t.url, ['forward']);
  const pm = new GatewayClient({ url: proxy.url, token: tokenOf('pm'), retryBaseMs: 1 });
  const refused = await pm.send({ to: 'platform', kind: 'status' }).catch((e: unknown) => e);
  expect(refused).toMatchObject({ status: 403, code: 'not_member', retryable: false });
  expect(proxy.tries).toHaveLength(1);
  await proxy.close();

  proxy = await startProxy(t.url, [{ status: 429, retryAfter: '60' }, 'forward']);
  const limited = new GatewayClient({
    url: proxy.url,
    token: tokenOf('pm'),
    retryMaxMs: 5_000,
  });
  const err = await limited.send({ to: '@qa', kind: 'status' }).catch((e: unknown) => e);
  expect(err).toMatchObject({ status: 429, retryAfterS: 60 });
  expect(proxy.tries).toHaveLength(1);
});
