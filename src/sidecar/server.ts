/**
 * The gateway sidecar: the agent's only door, on localhost. Sends go through the forwarder
 * (breaker, outbox, drain); the inbox, acks, nacks, heartbeat and replay are passed to the
 * adapter with the agent's token; emergencies go to journald and work with the adapter down.
 * /readyz holds the agent's start until the adapter's /health has answered 200 once.
 */
import { mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { Gauge, Registry } from 'prom-client';
import { z } from 'zod';
import { AdapterClient } from '../client/adapter-client.js';
import type { Emergencies } from '../journald/emergency.js';
import { parseDeliveryIds } from '../protocol/delivery-ids.js';
import { parseEnvelope } from '../protocol/envelope.js';
import { GatewayError, isGatewayError } from '../protocol/errors.js';
import { expectMethod, parseJson, readBody, sendError, sendJson } from '../protocol/http.js';
import { uuidv7 } from '../protocol/ids.js';
import { AdapterBreaker, type StoredBreaker } from './circuit-breaker.js';
import { Forwarder } from './forwarder.js';
import { Inbox } from './inbox.js';
import { Outbox } from './outbox.js';
import type { SidecarSettings } from './settings.js';

export interface SidecarOptions {
  readonly settings: SidecarSettings;
  readonly logger: Logger;
  readonly emergencies: Emergencies;
  /** Breaker and drain timing; defaults are the production ones. */
  readonly breaker?: { baseMs?: number; maxMs?: number; volumeThreshold?: number };
}

export interface Sidecar {
  readonly url: string;
  /** Resolves once the adapter's /health has answered 200 (the start gate opened). */
  readonly gateOpen: Promise<void>;
  readonly outbox: Outbox;
  /** Stops taking sends, tries one drain within the grace period, closes. */
  close(): Promise<void>;
}

const MAX_BODY = 256 * 1024;
const EmergencyBody = z.strictObject({
  reason: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, 'must be a short lower-case reason'),
  message: z.string().min(1).max(8192),
  fields: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
});
const PROXY_GET = /^\/v1\/(inbox|channels\/[^/]+\/messages)$/;
const PROXY_POST = new Set(['/v1/acks', '/v1/nacks', '/v1/heartbeat']);

export async function startSidecar(opts: SidecarOptions): Promise<Sidecar> {
  const { settings, logger, emergencies } = opts;
  mkdirSync(dirname(settings.outbox), { recursive: true });
  const outbox = new Outbox(settings.outbox, settings.outboxCapacity);
  const client = new AdapterClient({
    url: settings.adapterUrl,
    token: settings.agentToken,
    connectTimeoutMs: settings.adapterConnectTimeoutMs,
  });
  const breaker = new AdapterBreaker({
    ...opts.breaker,
    load: () => outbox.getState<StoredBreaker>('breaker'),
    save: (s) => outbox.setState('breaker', s),
    onTransition: (s) => {
      logger.warn({ breaker: s }, `circuit ${s.state}`);
      if (s.state === 'open') {
        emergencies.raise({
          reason: 'circuit_open',
          message: `the circuit to the adapter opened (step ${s.step}, next probe in ${s.resetMs} ms)`,
        });
      }
    },
  });
  const inbox = new Inbox(outbox.database, settings.agentId, client);
  const forwarder = new Forwarder({
    client,
    breaker,
    outbox,
    emergencies,
    logger,
    onAssigned: (channel, seq) => inbox.sent(channel, seq),
    retryBaseMs: opts.breaker?.baseMs,
    retryMaxMs: opts.breaker?.maxMs,
  });

  // The start gate: poll /health with the breaker's backoff until it answers 200 once.
  let gateIsOpen = false;
  let openGate: () => void = () => {};
  const gateOpen = new Promise<void>((resolve) => {
    openGate = resolve;
  });
  let gateTimer: NodeJS.Timeout | undefined;
  let gateStep = 0;
  const probe = async () => {
    gateTimer = undefined;
    if (await client.health()) {
      gateIsOpen = true;
      forwarder.lastContact = Date.now();
      breaker.close();
      forwarder.kick();
      openGate();
      return;
    }
    const base = opts.breaker?.baseMs ?? 1000;
    const cap = Math.min(opts.breaker?.maxMs ?? 60_000, base * 2 ** gateStep++);
    gateTimer = setTimeout(probe, Math.max(50, cap * Math.random()));
  };
  const alarm = setTimeout(() => {
    if (!gateIsOpen) {
      emergencies.raise({
        reason: 'adapter_unreachable',
        message: `the adapter at ${settings.adapterUrl} has not answered /health for ${settings.startupAlarmS} s since start`,
      });
    }
  }, settings.startupAlarmS * 1000);
  alarm.unref();

  const metrics = new Registry();
  new Gauge({
    name: 'agw_sidecar_outbox_depth',
    help: 'Messages waiting in the outbox.',
    registers: [metrics],
    collect() {
      this.set(outbox.depth);
    },
  });
  new Gauge({
    name: 'agw_sidecar_breaker_open',
    help: '1 when the circuit to the adapter is open, 0.5 half-open, 0 closed.',
    registers: [metrics],
    collect() {
      this.set(breaker.state === 'open' ? 1 : breaker.state === 'half_open' ? 0.5 : 0);
    },
  });
  new Gauge({
    name: 'agw_sidecar_outbox_full_total',
    help: 'Sends refused with 503 outbox_full since start.',
    registers: [metrics],
    collect() {
      this.set(forwarder.refusedFull);
    },
  });
  new Gauge({
    name: 'agw_sidecar_local_dead_letters',
    help: 'Queued messages the adapter refused for good.',
    registers: [metrics],
    collect() {
      this.set(outbox.deadLetters);
    },
  });

  const proxy = async (
    method: 'GET' | 'POST',
    url: string,
    body: string | undefined,
    wait: number,
  ) => {
    try {
      const timeout = (Number.isFinite(wait) ? Math.min(Math.max(wait, 0), 30) : 0) * 1000 + 10_000;
      const answer = await client.request(method, url, body, timeout);
      forwarder.lastContact = Date.now();
      return answer;
    } catch (err) {
      forwarder.lastError = (err as Error).message;
      throw new GatewayError('adapter_unreachable', 'the adapter cannot be reached; retry later', {
        retryAfterS: 2,
      });
    }
  };

  let closing = false;
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (path === '/readyz') {
      if (gateIsOpen) return sendJson(res, 200, { status: 'ready' });
      throw new GatewayError(
        'not_ready',
        `the adapter at ${settings.adapterUrl} has not answered /health yet`,
      );
    }
    if (path === '/metrics') {
      res.writeHead(200, { 'content-type': metrics.contentType });
      res.end(await metrics.metrics());
      return;
    }
    if (path === '/v1/status') {
      return sendJson(res, 200, {
        agent_id: settings.agentId,
        adapter_url: settings.adapterUrl,
        ready: gateIsOpen,
        breaker: breaker.snapshot,
        outbox: {
          depth: outbox.depth,
          capacity: outbox.capacity,
          dead_letters: outbox.deadLetters,
        },
        last_adapter_contact:
          forwarder.lastContact === null ? null : new Date(forwarder.lastContact).toISOString(),
        last_error: forwarder.lastError,
      });
    }
    if (path === '/v1/emergency') {
      expectMethod(req, 'POST');
      const parsed = EmergencyBody.safeParse(parseJson(await readBody(req, MAX_BODY)));
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const field = issue?.path.map(String).join('.') || 'body';
        throw new GatewayError('invalid_request', `${field}: ${issue?.message ?? 'invalid'}`, {
          field,
        });
      }
      const written = emergencies.raise(parsed.data, { explicit: true });
      return sendJson(res, 202, { status: written ? 'written' : 'rate_limited' });
    }
    if (closing) throw new GatewayError('shutting_down', 'the sidecar is stopping; retry shortly');
    if (path === '/v1/messages') {
      expectMethod(req, 'POST');
      let value = parseJson(await readBody(req, MAX_BODY)) as Record<string, unknown> | null;
      if (
        typeof value === 'object' &&
        value !== null &&
        !Array.isArray(value) &&
        value.idempotency_key === undefined
      ) {
        // time-ordered, so the adapter's key index stays local (bench/RESULTS.md, random keys)
        value = { ...value, idempotency_key: uuidv7() };
      }
      const envelope = parseEnvelope(value); // checked here too: a bad one is never queued
      if (envelope.sender !== undefined && envelope.sender !== settings.agentId) {
        throw new GatewayError(
          'sender_mismatch',
          `this sidecar speaks for ${settings.agentId}, not "${envelope.sender}"`,
          {
            field: 'sender',
          },
        );
      }
      const answer = await forwarder.send(value as Record<string, unknown>);
      if (answer.retryAfterS !== undefined)
        res.setHeader('retry-after', String(answer.retryAfterS));
      return sendJson(res, answer.status, answer.body);
    }
    if (
      (req.method === 'GET' && PROXY_GET.test(path)) ||
      (req.method === 'POST' && PROXY_POST.has(path))
    ) {
      const wait = Number(new URLSearchParams(q < 0 ? '' : url.slice(q + 1)).get('wait') ?? 0);
      let body =
        req.method === 'POST' ? (await readBody(req, MAX_BODY)).toString('utf8') : undefined;
      let local: number[] = [];
      if (path === '/v1/acks' || path === '/v1/nacks') {
        const ids = parseDeliveryIds(Buffer.from(body ?? ''), { negativeToo: true });
        const split =
          path === '/v1/acks'
            ? inbox.acked(ids)
            : { upstream: ids.filter((id) => id > 0), local: ids.filter((id) => id < 0) };
        local = split.local;
        if (split.upstream.length === 0) {
          // only the sidecar's own replayed copies: nothing for the adapter to hear
          return sendJson(
            res,
            200,
            path === '/v1/acks'
              ? { acked: local, dead_lettered: [], unknown: [] }
              : { nacked: [], ignored: local, unknown: [] },
          );
        }
        body = JSON.stringify({ delivery_ids: split.upstream });
      }
      const answer = await proxy(req.method as 'GET' | 'POST', url, body, wait);
      let text = answer.body;
      if (answer.status === 200 && path === '/v1/inbox') text = await inbox.repair(text);
      if (answer.status === 200 && local.length > 0) {
        const merged = JSON.parse(text) as Record<string, number[]>;
        if (path === '/v1/acks') merged.acked = [...(merged.acked ?? []), ...local];
        else merged.ignored = [...(merged.ignored ?? []), ...local];
        text = JSON.stringify(merged);
      }
      if (answer.retryAfterS !== undefined)
        res.setHeader('retry-after', String(answer.retryAfterS));
      return sendJson(res, answer.status, text);
    }
    throw new GatewayError('not_found', `no endpoint ${req.method} ${path}`);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) return void res.destroy();
      if (isGatewayError(err)) return sendError(res, err);
      logger.error({ err, url: req.url }, 'request failed');
      sendError(res, new GatewayError('internal', 'the sidecar failed to handle the request'));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.listen.port, settings.listen.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  void probe();
  forwarder.kick();

  return {
    url: `http://${host}:${address.port}`,
    gateOpen,
    outbox,
    close: async () => {
      if (closing) return;
      closing = true;
      if (gateTimer !== undefined) clearTimeout(gateTimer);
      clearTimeout(alarm);
      // one last drain within the grace period; what is left stays on disk for the next start
      forwarder.kick();
      await Promise.race([
        forwarder.settled(),
        new Promise((r) => setTimeout(r, settings.shutdownGraceMs).unref()),
      ]);
      forwarder.stop();
      breaker.shutdown();
      server.close();
      server.closeAllConnections();
      await client.close();
      outbox.close();
    },
  };
}
