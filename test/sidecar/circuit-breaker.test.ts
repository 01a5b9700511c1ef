/**
 * The breaker's reset backoff, with fake timers and a real counting server: while open, the
 * adapter sees at most one probe per backoff interval, and the interval doubles up to its cap;
 * a stored open breaker comes back open after a restart.
 */
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, expect, it, vi } from 'vitest';
import { AdapterBreaker, type StoredBreaker } from '../../src/sidecar/circuit-breaker.js';
import { SidecarEventMap } from '../../src/sidecar/events.js';

let hits: number[] = [];
let port = 0;
const server = createServer((_req, res) => {
  hits.push(Date.now()); // the faked clock: when, in breaker time, the probe arrived
  res.writeHead(503).end();
});
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  server.close();
});
afterEach(() => {
  vi.useRealTimers();
});

/** One call to the down adapter: a real request over loopback, failing with its 503. */
const call = () =>
  new Promise<void>((resolve, reject) => {
    request({ host: '127.0.0.1', port, path: '/v1/messages', method: 'POST' }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 503 ? reject(new Error('503')) : resolve()));
    })
      .on('error', reject)
      .end();
  });

it('probes at most once per backoff interval, the interval doubling from 1 s to the 8 s cap', async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  hits = [];
  const opens: StoredBreaker[] = [];
  const events = new SidecarEventMap().on('breaker', (s) => {
    if (s.state === 'open') opens.push(s);
  });
  const breaker = new AdapterBreaker({
    baseMs: 1000,
    maxMs: 8000,
    volumeThreshold: 5,
    random: () => 1, // the top of the jitter range, so the intervals are exact
    events,
  });
  for (let i = 0; i < 5; i++) await breaker.fire(call).catch(() => {});
  expect(breaker.state).toBe('open');
  const opened = hits.length;
  // a caller hammering the breaker every 50 ms for 60 s of breaker time
  for (let t = 0; t < 60_000; t += 50) {
    await vi.advanceTimersByTimeAsync(50);
    await breaker.fire(call).catch(() => {});
  }
  const probes = hits.slice(opened);
  const gaps = probes.slice(1).map((t, i) => t - probes[i]!);
  // 1, 2, 4, 8, 8, 8 ... seconds between probes (each within one 50 ms hammer step)
  expect(opens.map((o) => o.resetMs).slice(0, 5)).toEqual([1000, 2000, 4000, 8000, 8000]);
  for (const [i, gap] of gaps.entries()) {
    const interval = opens[i + 1]!.resetMs;
    expect(gap).toBeGreaterThanOrEqual(interval);
    expect(gap).toBeLessThanOrEqual(interval + 100);
  }
  expect(probes.length).toBeLessThanOrEqual(1 + Math.ceil(60_000 / 1000)); // far fewer than 1,200 calls
  expect(probes.length).toBeGreaterThanOrEqual(7);
  breaker.shutdown();
});

it('a stored open breaker is open again after a restart, and closes on success', async () => {
  let stored: StoredBreaker | undefined;
  const first = new AdapterBreaker({ volumeThreshold: 1, save: (s) => (stored = s) });
  await first.fire(call).catch(() => {});
  expect(first.state).toBe('open');
  first.shutdown();
  expect(stored).toMatchObject({ state: 'open', step: 1 });

  hits = [];
  const second = new AdapterBreaker({
    volumeThreshold: 1,
    load: () => stored,
    save: (s) => (stored = s),
  });
  expect(second.state).toBe('open');
  await expect(second.fire(call)).rejects.toMatchObject({ code: 'EOPENBREAKER' });
  expect(hits).toEqual([]); // the restarted sidecar did not call the down adapter
  second.close(); // /health answered 200
  expect(second.state).toBe('closed');
  expect(stored).toMatchObject({ state: 'closed', step: 0 });
  second.shutdown();
});
