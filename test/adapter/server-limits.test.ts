/**
 * The adapter's HTTP server under abuse: 300 sockets trickling headers (slowloris) are closed by
 * the server while normal sends and polls are served; a long poll outlives the request timeout;
 * the connection cap; the bound on one agent's concurrent polls; a batch body past its bound is
 * refused before it is read, by Content-Length or, chunked, as soon as it passes. Timeouts are
 * set short here so the server's own checks fire within the test; nothing asserts a duration.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, pollAs, sendAs } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await t?.stop();
  t = undefined;
});

function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** A socket that is open once this resolves. */
function open(url: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(hostPort(url), () => resolve(s));
    s.on('error', reject);
    sockets.push(s);
  });
}

/** Settles when the other side ends or closes the socket (we never do before the test's end). */
const closedByPeer = (s: Socket) =>
  new Promise<void>((resolve) => {
    s.once('end', resolve);
    s.once('close', resolve);
  });

it('closes 300 sockets that trickle headers, while sends and polls are served', {
  timeout: 60_000,
}, async () => {
  t = await startTestAdapter({
    headersTimeoutMs: '1000',
    requestTimeoutMs: '2000',
    connectionsCheckingIntervalMs: '100',
    // all 300 from one address, kept past the idle bound of a peer without a token
    // (connection-limits.test.ts): here the headers timeout is under test
    maxConnectionsPerAddress: '1000',
    unauthenticatedIdleMs: '600000',
  });
  const url = t.url;
  const slow = await Promise.all(Array.from({ length: 300 }, () => open(url)));
  const answers = slow.map(() => '');
  const closed = slow.map((s) => closedByPeer(s));
  slow.forEach((s, i) => {
    s.on('data', (d) => {
      answers[i] += d.toString('latin1');
    });
    s.on('error', () => {}); // a reset after the server's close is still the server's close
    s.write(
      `POST /v1/messages HTTP/1.1\r\nHost: adapter\r\nAuthorization: Bearer ${tokenOf('pm')}\r\n`,
    );
  });
  // one more header line every 50 ms from each: never the blank line that ends them
  const drip = setInterval(() => {
    for (const s of slow) if (s.writable) s.write('X-Slow: 1\r\n');
  }, 50);
  try {
    // normal traffic meanwhile: every send and poll answers as usual
    const traffic = (async () => {
      let sent = 0;
      for (let i = 0; i < 20; i++) {
        await sendAs(url, 'pm', '@qa', 'status', { i });
        sent++;
      }
      const got = await pollAs(url, 'qa', { max: 100 });
      return { sent, got: got.length };
    })();
    await Promise.all(closed);
    expect(await traffic).toEqual({ sent: 20, got: 20 });
  } finally {
    clearInterval(drip);
  }
  // the server said why before it closed them
  for (const a of answers) expect(a).toMatch(/^HTTP\/1\.1 408 /);
  // and it still serves
  expect((await call(url, 'GET', '/health')).status).toBe(200);
});

it('lets a long poll wait past the request timeout', { timeout: 30_000 }, async () => {
  t = await startTestAdapter({
    headersTimeoutMs: '300',
    requestTimeoutMs: '500',
    connectionsCheckingIntervalMs: '50',
  });
  // 2 s of waiting is four request timeouts and forty checks: a poll cut by them would fail
  const poll = call(t.url, 'GET', '/v1/inbox?wait=2', { agent: 'qa' });
  const r = await poll;
  expect([r.status, r.body]).toEqual([200, { deliveries: [] }]);
  // and one woken by a send after the timeout has passed answers with it
  const woken = call(t.url, 'GET', '/v1/inbox?wait=5', { agent: 'qa' });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  await sendAs(t.url, 'pm', '@qa');
  const w = await woken;
  expect(w.status).toBe(200);
  expect(w.body.deliveries).toHaveLength(1);
});

it('closes a connection past AGW_MAX_CONNECTIONS at once, leaving the others open', {
  timeout: 30_000,
}, async () => {
  // no reserve for agents: 16 connections without a token may hold all (connection-limits.ts)
  t = await startTestAdapter({ maxConnections: '16', reservedConnectionsPercent: '0' });
  const held = await Promise.all(Array.from({ length: 16 }, () => open(t!.url)));
  const extra = await open(t.url);
  extra.on('error', () => {});
  let answered = '';
  extra.on('data', (d) => {
    answered += d.toString();
  });
  await closedByPeer(extra);
  expect(answered).toBe(''); // closed, not served
  for (const s of held) expect(s.readyState).toBe('open');
  // a request on one of the connections held is served as usual
  held[0]!.write('GET /healthz HTTP/1.1\r\nHost: adapter\r\nConnection: close\r\n\r\n');
  const reply = await new Promise<string>((resolve) => {
    let text = '';
    held[0]!.on('data', (d) => {
      text += d.toString();
    });
    held[0]!.on('end', () => resolve(text));
  });
  expect(reply).toMatch(/^HTTP\/1\.1 200 /);
});

it("refuses an agent's poll past AGW_MAX_POLLS_PER_AGENT with 429, others' not", {
  timeout: 30_000,
}, async () => {
  t = await startTestAdapter({ maxPollsPerAgent: '2' });
  const url = t.url;
  const parked = [1, 2].map(() => call(url, 'GET', '/v1/inbox?wait=2', { agent: 'qa' }));
  // a poll counts from its arrival: a third is refused once the two have arrived (a few of
  // ours may come before they do, and are answered at once)
  let third = await call(url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' });
  for (let i = 0; i < 50 && third.status === 200; i++)
    third = await call(url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' });
  expect(third.status).toBe(429);
  expect(third.body.error).toBe('too_many_polls');
  expect(third.headers.get('retry-after')).toBe('1');
  // another agent is not held to qa's count
  expect((await call(url, 'GET', '/v1/inbox?wait=0', { agent: 'research' })).status).toBe(200);
  for (const p of parked) expect((await p).status).toBe(200);
  // once they have answered, qa may poll again
  expect((await call(url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' })).status).toBe(200);
});

/** A raw POST of a batch: headers sent at once, then `body` written, never ended. */
function unfinishedBatch(
  url: string,
  headers: Record<string, string | number>,
  body: Buffer,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/messages/batch`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${tokenOf('pm')}`,
        'content-type': 'application/json',
        ...headers,
      },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d) => {
        text += d.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.on('error', () => {}); // the server closes while we would still write: expected
    req.flushHeaders();
    if (body.length > 0) req.write(body);
  });
}

it('refuses a batch body past its bound before reading it: by Content-Length, and chunked as soon as it passes', {
  timeout: 30_000,
}, async () => {
  // 8 KiB messages: a batch body may be 100 times that, 819,200 bytes
  t = await startTestAdapter({ maxMessageBytes: '8192' });
  const bound = 8192 * 100;
  // a declared length past the bound: answered with no byte of the body sent
  const declared = await unfinishedBatch(t.url, { 'content-length': 30_000_000 }, Buffer.alloc(0));
  expect(declared.status).toBe(413);
  expect(JSON.parse(declared.text).error).toBe('payload_too_large');
  // chunked, no length: answered once one byte more than the bound has come, never ended
  const chunked = await unfinishedBatch(
    t.url,
    { 'transfer-encoding': 'chunked' },
    Buffer.alloc(bound + 1, 0x20),
  );
  expect(chunked.status).toBe(413);
  // a batch within the bound is taken as usual
  const ok = await call(t.url, 'POST', '/v1/messages/batch', {
    agent: 'pm',
    body: {
      messages: [{ idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {} }],
    },
  });
  expect(ok.status).toBe(200);
});

it('tells clients its keep-alive timeout, longer than undici keeps an idle connection', async () => {
  t = await startTestAdapter();
  const r = await call(t.url, 'GET', '/healthz');
  expect(r.headers.get('keep-alive')).toBe('timeout=65');
});
