/**
 * Inbox repair with the adapter's byte-bounded pages: a gap of large messages comes back from
 * replay one message a page, fewer than asked for; the sidecar goes on from each page's last
 * sequence, never takes a short page for the end, and hands the whole gap over in order.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { startSidecar } from '../../src/sidecar/server.js';
import { SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('scans a gap across pages shorter than asked for and hands it all over, in order', {
  timeout: 30_000,
}, async () => {
  // 64 KiB pages, 100 KiB messages: every replay page holds one
  const adapter = await startTestAdapter({ maxPageBytes: '65536' });
  stops.push(adapter.stop);
  const { dir, cleanup } = tempDir('agw-short-pages-');
  const settings = SidecarSettingsSchema.parse({
    listen: '127.0.0.1:0',
    adapterUrl: adapter.url,
    agentId: 'qa',
    agentToken: tokenOf('qa'),
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
  const sidecar = await startSidecar({
    settings,
    logger: pino({ level: 'silent' }),
    emergencies: new Emergencies(writer, { agentId: 'qa' }),
  });
  stops.push(() => {
    writer.close();
    cleanup();
  });
  stops.push(() => sidecar.close());
  await sidecar.gateOpen;
  const inbox = async () =>
    (await call(sidecar.url, 'GET', '/v1/inbox?max=10')).body.deliveries as Json[];
  const blob = 'x'.repeat(100 * 1024);

  await sendAs(adapter.url, 'pm', '@qa', 'status', { n: 0 });
  const first = await inbox();
  expect(first.map((d) => d.message.payload.n)).toEqual([0]);
  await call(sidecar.url, 'POST', '/v1/acks', {
    body: { delivery_ids: first.map((d) => d.delivery_id) },
  });

  // n=1..5 taken with qa's token behind the sidecar's back and acked there: a gap of five
  for (let n = 1; n <= 5; n++) await sendAs(adapter.url, 'pm', '@qa', 'status', { n, blob });
  for (let n = 1; n <= 5; n++) {
    const [d] = (await call(adapter.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(d.message.payload.n).toBe(n); // one a poll: the page bound
    await call(adapter.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [d.delivery_id] },
    });
  }
  // a replay page of the gap is shorter than the sidecar asks for
  const page = await call(adapter.url, 'GET', '/v1/channels/%40qa/messages?after=1&limit=5', {
    agent: 'qa',
  });
  expect(page.body.messages).toHaveLength(1);

  await sendAs(adapter.url, 'pm', '@qa', 'status', { n: 6 });
  const repaired = await inbox();
  expect(repaired.map((d) => d.message.payload.n)).toEqual([1, 2, 3, 4, 5, 6]);
  expect(repaired.slice(0, 5).every((d) => d.delivery_id < 0)).toBe(true); // copies from replay
});
