/**
 * agw_messages_total counts messages, not requests: each message of a batch by its own outcome
 * (created, duplicate, or the code it was refused with), as a message sent alone is; a batch is
 * no outcome of its own. Sidecars forward everything through POST /v1/messages/batch, so this is
 * what the counter shows in a deployment: checked on a batch sent to the adapter, and on a
 * real sidecar's drain of its outbox. The adapter's /metrics also carries prom-client's process
 * and Node metrics and agw_build_info, in a text Prometheus parses.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { VERSION } from '../../src/protocol/version.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, recordingProxy } from '../helpers/http.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { type Family, parseExposition, sampleValue } from './exposition.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function scrape(url: string): Promise<Map<string, Family>> {
  const res = await call(url, 'GET', '/metrics');
  expect(res.status).toBe(200);
  return parseExposition(res.body as string);
}

/** agw_messages_total by outcome. */
function outcomes(families: Map<string, Family>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const s of families.get('agw_messages_total')?.samples ?? [])
    counts[s.labels.outcome!] = s.value;
  return counts;
}

/** What moved between two readings of agw_messages_total, the outcomes that did not left out. */
function moved(before: Record<string, number>, after: Record<string, number>) {
  return Object.fromEntries(
    Object.entries(after)
      .map(([k, v]) => [k, v - (before[k] ?? 0)] as const)
      .filter(([, d]) => d !== 0),
  );
}

const envelope = (key: string, to: string) => ({
  idempotency_key: key,
  to,
  kind: 'status',
  payload: { n: key },
});

it('counts each message of a batch by its outcome, and a message alone the same way', async () => {
  const a = await startTestAdapter();
  stops.push(a.stop);
  const stored = randomUUID();
  // alone: created
  const first = await call(a.url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: envelope(stored, '@qa'),
  });
  expect(first.status).toBe(201);
  const before = outcomes(await scrape(a.url));
  expect(before).toEqual({ created: 1 });
  // a batch of three: a new one, a repeat of the one above, one to a channel pm is not in
  const batch = await call(a.url, 'POST', '/v1/messages/batch', {
    agent: 'pm',
    body: {
      messages: [
        envelope(randomUUID(), '@qa'),
        envelope(stored, '@qa'),
        envelope(randomUUID(), 'platform'),
      ],
    },
  });
  expect(batch.status).toBe(200);
  expect(batch.body.results.map((r: { status: number }) => r.status)).toEqual([201, 200, 403]);
  const after = outcomes(await scrape(a.url));
  expect(moved(before, after)).toEqual({ created: 1, duplicate: 1, not_member: 1 });
  expect(after.batch).toBeUndefined();
  // a batch refused whole (no messages to count) counts once, by its code
  const empty = await call(a.url, 'POST', '/v1/messages/batch', {
    agent: 'pm',
    body: { messages: [] },
  });
  expect(empty.status).toBe(400);
  expect(moved(after, outcomes(await scrape(a.url)))).toEqual({ invalid_request: 1 });
});

it("counts a real sidecar's drain of three queued sends (one a duplicate, one refused) per message", async () => {
  const a = await startTestAdapter();
  stops.push(a.stop);
  // the adapter as the sidecar sees it: away (503) while `down`, else passed through
  let down = false;
  const proxy = await recordingProxy(a.url, (_req, res) => {
    if (!down) return false;
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'shutting_down', message: 'away for the test' }));
    return true;
  });
  stops.push(proxy.close);
  const pm = await startTestSidecar('pm', proxy.url);
  stops.push(pm.stop);
  const stored = randomUUID();
  expect(
    (await call(a.url, 'POST', '/v1/messages', { agent: 'pm', body: envelope(stored, '@qa') }))
      .status,
  ).toBe(201);

  down = true;
  for (const body of [
    envelope(stored, '@qa'),
    envelope(randomUUID(), '@qa'),
    envelope(randomUUID(), 'platform'),
  ]) {
    const r = await call(pm.url, 'POST', '/v1/messages', { body });
    expect([r.status, r.body.status]).toEqual([202, 'queued']);
  }
  expect(pm.sidecar.outbox.depth).toBe(3);
  const before = outcomes(await scrape(a.url));
  const passed = proxy.ended.length;

  const drained = new Promise<void>((resolve) => {
    let left = 3;
    const one = () => {
      if (--left === 0) resolve();
    };
    pm.sidecar.events.on('outbox:sent', one);
    pm.sidecar.events.on('outbox:dead-letter', one);
  });
  down = false;
  await drained;
  expect(pm.sidecar.outbox.depth).toBe(0);
  // one batch request carried the three
  expect(proxy.ended.slice(passed).filter((e) => e.startsWith('POST /v1/messages'))).toEqual([
    'POST /v1/messages/batch -> 200',
  ]);
  const after = outcomes(await scrape(a.url));
  expect(moved(before, after)).toEqual({ created: 1, duplicate: 1, not_member: 1 });
  expect(after.batch).toBeUndefined();
}, 30_000);

it("serves the process's and Node's metrics and agw_build_info beside its own", async () => {
  const a = await startTestAdapter();
  stops.push(a.stop);
  const families = await scrape(a.url);
  expect(sampleValue(families, 'agw_build_info', { version: VERSION, node: process.version })).toBe(
    1,
  );
  expect(families.get('agw_build_info')?.type).toBe('gauge');
  expect(families.get('process_cpu_seconds_total')?.type).toBe('counter');
  expect(sampleValue(families, 'process_cpu_seconds_total')).toBeGreaterThan(0);
  expect(sampleValue(families, 'nodejs_heap_size_total_bytes')).toBeGreaterThan(0);
  expect(families.get('nodejs_gc_duration_seconds')?.type).toBe('histogram');
  // the adapter's own are there too, and every *_total is a counter (prom-client's gauges of
  // active handles named *_total are left out; their per-type gauges stay)
  expect(families.get('agw_messages_total')?.type).toBe('counter');
  expect(families.has('nodejs_active_handles')).toBe(true);
  for (const [name, f] of families)
    expect(name.endsWith('_total'), `${name} is a ${f.type}`).toBe(f.type === 'counter');
  // two adapters in one process each serve them (one set of process metrics, shared)
  const b = await startTestAdapter();
  stops.push(b.stop);
  const other = await scrape(b.url);
  expect(other.has('process_cpu_seconds_total')).toBe(true);
  expect(sampleValue(other, 'agw_build_info', { version: VERSION, node: process.version })).toBe(1);
});
