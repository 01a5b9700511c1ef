/**
 * What a peer without a token may hold of the adapter's connections
 * (docs/reference/configuration.md, AGW_MAX_CONNECTIONS and the three settings below it): a flood
 * of idle keep-alive connections, one GET /healthz each, from one address or from many, does not
 * keep an agent's request or /health out; an idle connection that never showed a token is closed
 * after AGW_UNAUTHENTICATED_IDLE_MS, one that did is kept alive. Real sockets on loopback
 * (127.0.0.2 and up are other addresses of it); the caps are lowered through the settings; closes
 * are awaited as events, never timed.
 */
import type { Socket } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { closed, destroyOpened, exchange, getRequest, rawConnect } from '../helpers/raw-http.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  destroyOpened();
  await t?.stop();
  t = undefined;
});

/** Small caps: 64 connections, 16 of them kept for agents, 8 per address; idle: no end soon. */
const SMALL = {
  maxConnections: '64',
  reservedConnectionsPercent: '25',
  maxConnectionsPerAddress: '8',
  unauthenticatedIdleMs: '600000',
};

/**
 * `n` connections from `from`, one after the other, each answered a GET /healthz and then left
 * idle; answers the ones that got their answer. One the server refuses or closes before its
 * answer is left out.
 */
async function flood(url: string, from: string, n: number): Promise<Socket[]> {
  const got: Socket[] = [];
  for (let i = 0; i < n; i++) {
    try {
      const s = await rawConnect(url, from);
      const r = await exchange(s, getRequest('/healthz'));
      if (r.status === 200) got.push(s);
    } catch {
      // refused (reset) or closed: the flood goes on
    }
  }
  return got;
}

it('keeps serving agents and /health while one address floods it with idle connections', {
  timeout: 60_000,
}, async () => {
  t = await startTestAdapter(SMALL);
  // more than the whole cap from one address: without a share per address, the 65th and every
  // connection after it (the agent's included) would be reset
  const held = await flood(t.url, '127.0.0.2', 80);
  expect(held.length).toBe(80); // each got its answer: a newcomer is never turned away ...
  await Promise.all(held.slice(0, 80 - 8).map(closed)); // ... it takes the oldest idle's place
  expect(held.filter((s) => !s.destroyed)).toHaveLength(8);
  expect(t.adapter.connections.counts.untrusted).toBe(8);

  expect((await call(t.url, 'GET', '/v1/me', { agent: 'pm' })).status).toBe(200);
  expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  // a send from a connection opened now, beside the flood's
  const s = await rawConnect(t.url);
  expect((await exchange(s, getRequest('/v1/me', 'qa'))).status).toBe(200);
});

it('keeps serving agents and /health while many addresses fill every untrusted connection', {
  timeout: 60_000,
}, async () => {
  t = await startTestAdapter(SMALL);
  // 8 addresses × 8: all 64 connections, past the 48 untrusted ones may hold
  const held: Socket[] = [];
  for (let a = 2; a < 10; a++) held.push(...(await flood(t.url, `127.0.0.${a}`, 8)));
  expect(held.length).toBe(64);
  await Promise.all(held.slice(0, 64 - 48).map(closed)); // the oldest made room for the rest
  expect(t.adapter.connections.counts.untrusted).toBe(48);

  // an agent on a new connection, and the probe, still get in
  const agent = await rawConnect(t.url);
  expect((await exchange(agent, getRequest('/v1/me', 'pm'))).status).toBe(200);
  const probe = await rawConnect(t.url);
  expect((await exchange(probe, getRequest('/health'))).status).toBe(200);
  // the agent's connection is trusted now: more floods do not take its place
  expect(t.adapter.connections.counts.trusted).toBe(1);
  held.push(...(await flood(t.url, '127.0.0.10', 8)));
  expect(agent.destroyed).toBe(false);
  expect((await exchange(agent, getRequest('/v1/me', 'pm'))).status).toBe(200);
});

it('closes an idle connection that showed no token after AGW_UNAUTHENTICATED_IDLE_MS, and keeps one that did', {
  timeout: 30_000,
}, async () => {
  t = await startTestAdapter({ unauthenticatedIdleMs: '300' });
  const agent = await rawConnect(t.url);
  expect((await exchange(agent, getRequest('/v1/me', 'pm'))).status).toBe(200);
  const probe = await rawConnect(t.url);
  expect((await exchange(probe, getRequest('/healthz'))).status).toBe(200);
  const badToken = await rawConnect(t.url);
  expect(
    (await exchange(badToken, 'GET /v1/me HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n\r\n'))
      .status,
  ).toBe(401);
  const silent = await rawConnect(t.url); // never sends a byte
  await Promise.all([closed(probe), closed(badToken), closed(silent)]);
  // the agent's connection, idle as long as they were, is still open and serves
  expect(agent.destroyed).toBe(false);
  expect((await exchange(agent, getRequest('/v1/me', 'pm'))).status).toBe(200);
});
