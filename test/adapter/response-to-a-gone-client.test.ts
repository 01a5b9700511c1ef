/**
 * An answer for a client already gone (a long poll whose connection closed while it was parked)
 * arms no write timer: the timer held the adapter's exit for AGW_WRITE_TIMEOUT_MS (30 s) after a
 * SIGTERM and then logged a slow client that was not there. A real server on loopback, a real
 * client that hangs up; the timers are counted with fake timers around the send.
 */
import { createServer, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it, vi } from 'vitest';
import { ResponseBudget } from '../../src/adapter/response-budget.js';

afterEach(() => {
  vi.useRealTimers();
});

it('arms no write timer for an answer whose client has hung up, and reports no timeout', async () => {
  let held: ServerResponse | undefined;
  const closed = new Promise<void>((resolve) => {
    const server = createServer((_req, res) => {
      held = res;
      res.once('close', () => {
        server.close();
        resolve();
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      const req = request({ host: '127.0.0.1', port, path: '/v1/inbox?wait=30' });
      req.on('error', () => undefined);
      req.end();
      // the client goes away while the answer is still to come
      setTimeout(() => req.destroy(), 50);
    });
  });
  await closed;
  const timeouts: number[] = [];
  const budget = new ResponseBudget(1 << 20, 30_000, {
    emit: (_event: string, bytes: number) => timeouts.push(bytes),
  } as never);
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  const reservation = budget.reserve(held!, 0, true);
  await budget.send(held!, reservation, ['{"deliveries":[]}']);
  expect(vi.getTimerCount()).toBe(0);
  vi.advanceTimersByTime(60_000);
  expect(timeouts).toEqual([]);
});
