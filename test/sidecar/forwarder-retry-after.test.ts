/**
 * The forwarder and the adapter's 429, white-box with fake timers and an adapter connection
 * whose answers the test hands out one at a time: a send answered 429 waits in the outbox for
 * the Retry-After the adapter gave (`retry_after_s` of its batch entry), even when another send
 * gets through meanwhile (which would otherwise start the drain at once); and a 429 answered to
 * a whole request is never a circuit failure, where a 503 is.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it, vi } from 'vitest';
import {
  type AdapterClient,
  type AdapterResponse,
  RetryableAnswer,
} from '../../src/sidecar/adapter-client.js';
import { AdapterBreaker } from '../../src/sidecar/circuit-breaker.js';
import { SidecarEventMap } from '../../src/sidecar/events.js';
import { Forwarder } from '../../src/sidecar/forwarder.js';
import { Outbox } from '../../src/sidecar/outbox.js';
import { SidecarFile } from '../../src/store/sidecar/sidecar-file.js';
import { tempDir } from '../helpers/topology.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  vi.useRealTimers();
  for (const c of cleanups.splice(0)) c();
});

const ok = (results: object[]): AdapterResponse => ({
  status: 200,
  body: JSON.stringify({ results }),
  retryAfterS: undefined,
  retryable: false,
});
const created = (seq: number) => ({
  status: 201,
  message_id: `m-${seq}`,
  channel: '@qa',
  channel_sequence_id: seq,
  timestamp_iso8601: new Date().toISOString(),
  duplicate: false,
});
const limited = (s: number) => ({
  status: 429,
  error: 'rate_limited',
  message: 'pm sends faster than its rate',
  retry_after_s: s,
});

/** A forwarder over an adapter connection whose answers `answer(i, response)` hands out. */
function forwarder() {
  const { dir, cleanup } = tempDir('agw-forwarder-');
  const file = new SidecarFile(join(dir, 'outbox.db'));
  cleanups.push(() => {
    file.close();
    cleanup();
  });
  const outbox = new Outbox(file, 100);
  const requests: { body: string; answer: (r: AdapterResponse) => void }[] = [];
  const client = {
    url: 'http://adapter.invalid',
    lastError: null,
    lastContact: null,
    request: (_method: string, _path: string, body: string) =>
      new Promise<AdapterResponse>((resolve) => requests.push({ body, answer: resolve })),
    health: async () => true,
  } as unknown as AdapterClient;
  const breaker = new AdapterBreaker({ baseMs: 50, maxMs: 200 });
  cleanups.push(() => breaker.shutdown());
  // what would have raised a CRIT entry: a send refused as outbox full, or a local dead letter
  const raise = vi.fn();
  const events = new SidecarEventMap();
  events.on('outbox:full', raise).on('outbox:dead-letter', raise);
  const fw = new Forwarder({
    client,
    breaker,
    outbox,
    events,
    logger: pino({ level: 'silent' }),
    backoff: { baseMs: 50, maxMs: 200 },
  });
  cleanups.push(() => fw.stop());
  const send = (n: number) =>
    fw.send({ idempotency_key: `key-${n}`, to: '@qa', kind: 'status', payload: { n } });
  return { fw, outbox, requests, send, raise, breaker };
}

it("holds a send answered 429 in the outbox for the adapter's Retry-After, also when another send gets through meanwhile", async () => {
  vi.useFakeTimers({
    toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'],
  });
  const { outbox, requests, send, raise, breaker } = forwarder();
  // two sends in flight at once, each alone in its request
  const first = send(1);
  const second = send(2);
  await vi.advanceTimersByTimeAsync(0);
  expect(requests).toHaveLength(2);
  requests[0]!.answer(ok([limited(2)]));
  expect((await first).status).toBe(202);
  expect(outbox.depth).toBe(1);
  requests[1]!.answer(ok([created(1)])); // a success, as after an outage: no early drain here
  expect((await second).status).toBe(201);

  await vi.advanceTimersByTimeAsync(1999);
  expect(requests).toHaveLength(2); // nothing before the 2 s the adapter asked for
  await vi.advanceTimersByTimeAsync(1);
  expect(requests).toHaveLength(3); // the drain
  expect(JSON.parse(requests[2]!.body).messages.map((m: { payload: object }) => m.payload)).toEqual(
    [{ n: 1 }],
  );
  requests[2]!.answer(ok([created(2)]));
  await vi.advanceTimersByTimeAsync(0);
  expect(outbox.depth).toBe(0);
  expect(raise).not.toHaveBeenCalled();
  expect(breaker.state).toBe('closed');
});

it('never counts a 429 against the circuit, where the same number of 503s opens it', async () => {
  const answer = (status: number) => ({
    status,
    body: '{}',
    retryAfterS: 1,
    retryable: true,
  });
  const run = async (status: number) => {
    const breaker = new AdapterBreaker({ baseMs: 50, maxMs: 200, volumeThreshold: 2 });
    cleanups.push(() => breaker.shutdown());
    for (let i = 0; i < 10; i++) {
      await breaker
        .fire(async () => {
          throw new RetryableAnswer(answer(status));
        })
        .catch(() => {});
    }
    return breaker.state;
  };
  expect(await run(429)).toBe('closed');
  expect(await run(503)).toBe('open');
});
