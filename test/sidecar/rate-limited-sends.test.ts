/**
 * A sender past its rate, through its sidecar (docs/reference/sidecar.md, "The breaker and the
 * drain", on 429): three bursts' worth of sends, one after another, are delivered while the bucket
 * holds and queued once the adapter answers 429; the drain sends them again after the adapter's
 * Retry-After (`retry_after_s` of the batch entries), stopping at the first refused entry, until
 * the recipient has every message once, in send order. A 429 is never a circuit failure nor a CRIT
 * entry, and nothing goes to the local dead letters.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { type Sidecar, startSidecar } from '../../src/sidecar/server.js';
import { SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { httpAnswer } from '../helpers/answer.js';
import { call, type Json, recordingProxy } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function sidecarFor(agent: string, adapterUrl: string) {
  const { dir, cleanup } = tempDir('agw-rate-');
  const settings = SidecarSettingsSchema.parse({
    listen: '127.0.0.1:0',
    adapterUrl,
    agentId: agent,
    agentToken: tokenOf(agent),
    outbox: join(dir, 'outbox.db'),
    outboxCapacity: '1000',
    startupAlarmS: '60',
    shutdownGraceMs: '0',
    breakerBaseMs: '50',
    breakerMaxMs: '200',
    adapterConnectTimeoutMs: '2000',
    journalSocket: join(dir, 'no-journal.sock'),
    log: 'stdout',
    logLevel: 'silent',
  });
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  const emergencies = new Emergencies(writer, { agentId: agent });
  const sidecar: Sidecar = await startSidecar({
    settings,
    logger: pino({ level: 'silent' }),
    emergencies,
    breaker: { baseMs: 50, maxMs: 200 },
  });
  stops.push(() => {
    writer.close();
    cleanup();
  });
  stops.push(() => sidecar.close());
  await sidecar.gateOpen;
  return { sidecar, emergencies };
}

it('queues the sends past the rate and delivers all of them once, in send order, after the Retry-After; no circuit failure, no CRIT entry', {
  timeout: 30_000,
}, async () => {
  const BURST = 5;
  const adapter = await startTestAdapter({ sendRate: String(BURST), sendBurst: String(BURST) });
  stops.push(adapter.stop);
  // the sidecar's requests, counted on their way to the adapter (every send and drain is a batch)
  const proxy = await recordingProxy(adapter.url);
  stops.push(proxy.close);
  const batchRequests = () => proxy.seen.filter((r) => r === 'POST /v1/messages/batch').length;
  const { sidecar, emergencies } = await sidecarFor('pm', proxy.url);
  const before = batchRequests();

  const answers: number[] = [];
  for (let n = 0; n < 3 * BURST; n++) {
    const a = await httpAnswer('send', () =>
      sidecar.service.send({ to: '@qa', kind: 'status', payload: { n } }),
    );
    answers.push(a.status);
  }
  // the bucket's burst goes through (one more if a token came back meanwhile: 5 a second);
  // from the first 429 on, every send waits in the outbox behind it, in order
  const queuedFrom = answers.indexOf(202);
  expect(queuedFrom).toBeGreaterThanOrEqual(BURST);
  expect(queuedFrom).toBeLessThanOrEqual(BURST + 1);
  expect(answers).toEqual([
    ...Array(queuedFrom).fill(201),
    ...Array(3 * BURST - queuedFrom).fill(202),
  ]);

  await until(() => (sidecar.service.status() as Json).outbox.depth === 0, 'the outbox to drain');
  const got: Json[] = [];
  for (;;) {
    const page = await call(adapter.url, 'GET', '/v1/inbox?max=100', { agent: 'qa' });
    const deliveries = page.body.deliveries as Json[];
    if (deliveries.length === 0) break;
    got.push(...deliveries);
    await call(adapter.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: deliveries.map((d) => d.delivery_id) },
    });
  }
  expect(got.map((d) => d.message.payload.n)).toEqual(
    Array.from({ length: 3 * BURST }, (_, n) => n),
  );
  expect(got.every((d) => d.attempt === 1)).toBe(true);

  const status = sidecar.service.status() as Json;
  expect(status.breaker).toMatchObject({ state: 'closed', step: 0 });
  expect(status.outbox).toMatchObject({ depth: 0, dead_letters: 0 });
  expect(emergencies.stats).toMatchObject({ written: 0, suppressed: 0, refused: 0 });
  // the drain waited for the adapter's Retry-After instead of its own short backoff (50-200 ms
  // here): one request per send that went out alone, then one per bucket's worth, give or take
  // one where a token came back between two requests
  const requests = batchRequests() - before;
  expect(requests).toBeGreaterThanOrEqual(queuedFrom + 1);
  expect(requests).toBeLessThanOrEqual(BURST + 1 + 2 + 2);
});
