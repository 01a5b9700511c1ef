/**
 * Replays whose clients do not read (docs/reference/adapter-api.md, "Reads are bounded too"), on
 * SQLite and on PostgreSQL: one agent's reads past AGW_MAX_READS_PER_AGENT are 429 `too_many_reads`
 * with Retry-After; a client that never reads its answer is cut after AGW_WRITE_TIMEOUT_MS and its
 * slot freed; answers in flight past AGW_MAX_RESPONSE_BYTES make the next read 503 `overloaded`. A
 * page here is 16 MiB, four times what loopback's kernel buffers take from a client that stopped
 * reading (tcp_wmem's 4 MiB and the receiver's window), so such an answer cannot finish while the
 * test waits.
 */
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { closed, destroyOpened, getRequest, rawConnect } from '../helpers/raw-http.js';

const PAGE = 16 * 1024 * 1024;
const MESSAGE = 1024 * 1024;

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  destroyOpened();
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** An adapter on `store`, with 20 messages of 1 MiB in pm's own channel. */
async function adapterWith(
  store: 'sqlite' | 'postgres',
  settings: Record<string, string>,
): Promise<TestAdapter> {
  const db: Record<string, string> = {};
  if (store === 'postgres') {
    const d = await testDatabase();
    stops.push(() => d.drop());
    db.db = d.url;
  }
  const t = await startTestAdapter({
    maxMessageBytes: String(MESSAGE + 4096),
    maxPageBytes: String(PAGE),
    ...db,
    ...settings,
  });
  stops.push(() => t.stop());
  const text = 'x'.repeat(MESSAGE - 1024);
  for (let i = 0; i < 20; i++) await sendAs(t.url, 'pm', '@pm', 'status', { i, text });
  return t;
}

/**
 * A replay of pm's channel whose client reads the first bytes of the answer (so the server has
 * taken its slot and is sending) and then stops reading.
 */
async function stalledReplay(url: string): Promise<{ socket: Socket; head: string }> {
  const socket = await rawConnect(url);
  const first = once(socket, 'data');
  socket.write(getRequest('/v1/channels/@pm/messages?limit=1000', 'pm'));
  const [data] = (await first) as [Buffer];
  socket.pause();
  return { socket, head: data.toString('latin1', 0, 12) };
}

/** Reads the rest of what the socket gets until it closes; answers the bytes read. */
async function drain(s: Socket): Promise<number> {
  let n = 0;
  s.on('data', (d: Buffer) => {
    n += d.length;
  });
  const gone = closed(s);
  s.resume();
  await gone;
  return n;
}

describe.each(['sqlite', 'postgres'] as const)('on %s', (store) => {
  it("refuses an agent's replay past AGW_MAX_READS_PER_AGENT with 429 and Retry-After, others' not", {
    timeout: 120_000,
  }, async () => {
    const t = await adapterWith(store, { maxReadsPerAgent: '2', writeTimeoutMs: '600000' });
    const held = [await stalledReplay(t.url), await stalledReplay(t.url)];
    for (const h of held) expect(h.head).toBe('HTTP/1.1 200');
    const third = await call(t.url, 'GET', '/v1/channels/@pm/messages?limit=1', { agent: 'pm' });
    expect(third.status).toBe(429);
    expect(third.body.error).toBe('too_many_reads');
    expect(third.headers.get('retry-after')).toBe('1');
    // another agent's reads, pm's sends and the probe are not held to pm's count
    const qa = await call(t.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
    expect(qa.status).toBe(200);
    await sendAs(t.url, 'pm', '@qa');
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  });

  it('cuts a client that never reads its replay after AGW_WRITE_TIMEOUT_MS, and frees its slot', {
    timeout: 120_000,
  }, async () => {
    const t = await adapterWith(store, { maxReadsPerAgent: '1', writeTimeoutMs: '300' });
    const cut = new Promise<[number]>((resolve) =>
      t.adapter.events.on('response:timeout', (bytes) => resolve([bytes])),
    );
    const stalled = await stalledReplay(t.url);
    expect(stalled.head).toBe('HTTP/1.1 200');
    const [bytes] = await cut;
    expect(bytes).toBeGreaterThan(PAGE / 2); // the page's answer, cut
    // what the client still finds is its answer's beginning, then the end of the connection
    expect(await drain(stalled.socket)).toBeLessThan(bytes);
    // the slot is free again: a replay is answered in full
    const next = await call(t.url, 'GET', '/v1/channels/@pm/messages?limit=1', { agent: 'pm' });
    expect(next.status).toBe(200);
    expect(next.body.messages).toHaveLength(1);
  });

  it('refuses a read with 503 overloaded while the answers in flight hold AGW_MAX_RESPONSE_BYTES', {
    timeout: 120_000,
  }, async () => {
    const t = await adapterWith(store, {
      maxReadsPerAgent: '10',
      maxResponseBytes: String(2 * PAGE),
      writeTimeoutMs: '600000',
    });
    const held = [await stalledReplay(t.url), await stalledReplay(t.url)];
    for (const h of held) expect(h.head).toBe('HTTP/1.1 200');
    expect(t.adapter.responses.inFlight).toBeGreaterThan(PAGE);
    for (const agent of ['pm', 'qa']) {
      const r = await call(t.url, 'GET', `/v1/channels/@${agent}/messages`, { agent });
      expect(r.status).toBe(503);
      expect(r.body.error).toBe('overloaded');
      expect(r.headers.get('retry-after')).toBe('1');
    }
    // sends and the probe go on
    await sendAs(t.url, 'pm', '@qa');
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  });
});
