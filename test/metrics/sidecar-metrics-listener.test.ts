/**
 * AGW_METRICS_LISTEN (CONTRACT.md, docs/reference/sidecar.md): a real sidecar serves GET /metrics
 * on a listener of its own, to whatever Host Prometheus sends (the pod's IP), with the outbox
 * depth and the breaker state as they move, prom-client's process and Node metrics and
 * agw_build_info, in a text Prometheus parses; every other path there is 404, the agent API
 * included; the agent's port still refuses a Host that is not its own; and the listener stops
 * with the sidecar. Off by default.
 */
import { createServer, request } from 'node:http';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { readSettings } from '../../src/cli/settings.js';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { VERSION } from '../../src/protocol/version.js';
import type { StoredBreaker } from '../../src/sidecar/circuit-breaker.js';
import { type Sidecar, startSidecar } from '../../src/sidecar/server.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { type Json, sendAs } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { parseExposition, sampleValue } from './exposition.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/**
 * A sidecar for `agent` from AGW_* variables as the program reads them. Its breaker opens at the
 * first failure and stays open for a minute: a test reads the state it opened to.
 */
async function sidecarFor(agent: string, env: Record<string, string>): Promise<Sidecar> {
  const { dir, cleanup } = tempDir('agw-metrics-listen-');
  const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
    AGW_LISTEN: '127.0.0.1:0',
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    AGW_SHUTDOWN_GRACE_MS: '0',
    ...env,
  });
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  const sidecar = await startSidecar({
    settings,
    logger: pino({ level: 'silent' }),
    emergencies: new Emergencies(writer, { agentId: agent }),
    breaker: { baseMs: 60_000, maxMs: 60_000, volumeThreshold: 1 },
  });
  stops.push(async () => {
    await sidecar.close();
    writer.close();
    cleanup();
  });
  return sidecar;
}

/** One GET with exactly this Host header, over a connection of its own. */
function get(url: string, path: string, host: string): Promise<{ status: number; body: Json }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, path, headers: { host }, agent: false },
      (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
        });
        res.on('end', () => {
          let body: Json = text;
          try {
            body = JSON.parse(text);
          } catch {}
          resolve({ status: res.statusCode ?? 0, body });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

async function scrape(metricsUrl: string) {
  const res = await fetch(`${metricsUrl}/metrics`, { headers: { host: '10.1.2.3:9464' } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseExposition(await res.text());
}

it('serves /metrics to Prometheus on its own port: outbox depth, breaker state, defaults, build', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const sidecar = await sidecarFor('pm', {
    AGW_ADAPTER_URL: adapter.url,
    AGW_METRICS_LISTEN: '127.0.0.1:0',
  });
  await sidecar.gateOpen;
  expect(sidecar.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(sidecar.metricsUrl).not.toBe(sidecar.url);

  // the adapter answers: nothing queued, the circuit closed
  const before = await scrape(sidecar.metricsUrl!);
  expect(sampleValue(before, 'agw_sidecar_outbox_depth')).toBe(0);
  expect(sampleValue(before, 'agw_sidecar_breaker_open')).toBe(0);
  expect(before.get('agw_sidecar_outbox_depth')?.type).toBe('gauge');
  expect(before.get('agw_sidecar_breaker_open')?.type).toBe('gauge');
  expect(sampleValue(before, 'agw_build_info', { version: VERSION, node: process.version })).toBe(
    1,
  );
  expect(before.get('process_cpu_seconds_total')?.type).toBe('counter');
  expect(sampleValue(before, 'nodejs_heap_size_total_bytes')).toBeGreaterThan(0);
  for (const [name, f] of before)
    expect(name.endsWith('_total'), `${name} is a ${f.type}`).toBe(f.type === 'counter');

  // the adapter goes: a send is queued, and the circuit opens at the failure
  await adapter.stop();
  const opened = new Promise<StoredBreaker>((resolve) =>
    sidecar.events.on('breaker', (s) => {
      if (s.state === 'open') resolve(s);
    }),
  );
  const send = await fetch(`${sidecar.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ idempotency_key: 'k-1', to: '@qa', kind: 'status', payload: {} }),
  });
  expect(send.status).toBe(202);
  await opened;
  const during = await scrape(sidecar.metricsUrl!);
  expect(sampleValue(during, 'agw_sidecar_outbox_depth')).toBe(1);
  expect(sampleValue(during, 'agw_sidecar_breaker_open')).toBe(1);
}, 30_000);

it('answers 404 to everything but GET /metrics there, and the agent port still checks the Host', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const sidecar = await sidecarFor('qa', {
    AGW_ADAPTER_URL: adapter.url,
    AGW_METRICS_LISTEN: '127.0.0.1:0',
  });
  await sidecar.gateOpen;
  await sendAs(adapter.url, 'pm', '@qa', 'status');
  const metricsUrl = sidecar.metricsUrl!;
  const port = new URL(metricsUrl).port;
  // the pod's address, as Prometheus dials it, and a name: no Host check on this port
  for (const host of [`10.1.2.3:${port}`, `localhost:${port}`, 'evil.example'])
    expect((await get(metricsUrl, '/metrics', host)).status, host).toBe(200);
  // none of the agent API, none of the sidecar's own endpoints: the inbox leases nothing here
  for (const path of [
    '/v1/inbox',
    '/v1/inbox?wait=0',
    '/v1/status',
    '/v1/me',
    '/healthz',
    '/readyz',
    '/openapi.json',
    '/mcp',
    '/',
    '/metrics/',
  ]) {
    const r = await get(metricsUrl, path, `localhost:${port}`);
    expect([r.status, r.body.error], path).toEqual([404, 'not_found']);
  }
  const post = await fetch(`${metricsUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ idempotency_key: 'k', to: '@pm', kind: 'status', payload: {} }),
  });
  expect(post.status).toBe(404);
  await post.body?.cancel();
  // the message waits for qa, not leased by any of the above
  const inbox = await get(
    sidecar.url,
    '/v1/inbox?wait=0',
    `localhost:${new URL(sidecar.url).port}`,
  );
  expect(inbox.status).toBe(200);
  expect(inbox.body.deliveries.map((d: Json) => d.attempt)).toEqual([1]);
  // the agent's port: a Host that is not its own is refused, /metrics included
  for (const path of ['/v1/inbox', '/metrics']) {
    const r = await get(sidecar.url, path, `10.1.2.3:${new URL(sidecar.url).port}`);
    expect([r.status, r.body.error], path).toEqual([403, 'bad_host']);
  }
}, 30_000);

it('stops with the sidecar, and is off unless AGW_METRICS_LISTEN is set', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const off = await sidecarFor('qa', { AGW_ADAPTER_URL: adapter.url });
  expect(off.metricsUrl).toBeUndefined();
  const on = await sidecarFor('pm', {
    AGW_ADAPTER_URL: adapter.url,
    AGW_METRICS_LISTEN: '127.0.0.1:0',
  });
  await on.gateOpen;
  expect((await fetch(`${on.metricsUrl}/metrics`)).status).toBe(200);
  await on.close();
  await expect(fetch(`${on.metricsUrl}/metrics`)).rejects.toThrow();
}, 30_000);

it('refuses to start when its address is taken, naming AGW_METRICS_LISTEN, and frees the agent port', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const first = await sidecarFor('pm', {
    AGW_ADAPTER_URL: adapter.url,
    AGW_METRICS_LISTEN: '127.0.0.1:0',
  });
  const taken = new URL(first.metricsUrl!).host;
  const { dir, cleanup } = tempDir('agw-metrics-listen-');
  stops.push(cleanup);
  // the agent port of the one that fails: a fixed one, so that it can be seen free again
  const free = new URL(first.url).port;
  await first.close();
  const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
    AGW_LISTEN: `127.0.0.1:${free}`,
    AGW_ADAPTER_URL: adapter.url,
    AGW_AGENT_ID: 'qa',
    AGW_AGENT_TOKEN: tokenOf('qa'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    AGW_METRICS_LISTEN: taken,
  });
  // something else holds the metrics address now
  const holder = createServer();
  await new Promise<void>((done) =>
    holder.listen(Number(new URL(`http://${taken}`).port), '127.0.0.1', done),
  );
  stops.push(() => new Promise<void>((done) => holder.close(() => done())));
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  stops.push(() => writer.close());
  await expect(
    startSidecar({
      settings,
      logger: pino({ level: 'silent' }),
      emergencies: new Emergencies(writer, { agentId: 'qa' }),
    }),
  ).rejects.toThrow(new RegExp(`^AGW_METRICS_LISTEN ${taken}: .*EADDRINUSE`));
  // the agent port it had opened is closed again
  await expect(fetch(`http://127.0.0.1:${free}/healthz`)).rejects.toThrow();
}, 30_000);
