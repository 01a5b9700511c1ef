/**
 * The adapter's HTTP server: opens the store, listens, checks the store's integrity, and routes
 * requests. Shutdown stops intake, lets commits in flight finish and answer, then closes the
 * database.
 */
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { Emergencies } from '../journald/emergency.js';
import type { SdNotify } from '../journald/sd-notify.js';
import { GatewayError, isGatewayError } from '../protocol/errors.js';
import { expectMethod, intParam, readBody, sendError, sendJson } from '../protocol/http.js';
import { SqliteStore } from '../store/sqlite-store.js';
import { DeliveryService } from './delivery.js';
import { deliveryRoutes } from './delivery-routes.js';
import { GroupCommit } from './group-commit.js';
import { MAX_BATCH, postBatch, postMessage, type WriteContext } from './messages.js';
import { AdapterMetrics } from './metrics.js';
import { Retention } from './retention.js';
import { allChannels, assertReader } from './routing.js';
import type { AdapterSettings } from './settings.js';
import { agentForTokenHash, type Topology } from './topology.js';

export interface AdapterOptions {
  readonly settings: AdapterSettings;
  readonly topology: Topology;
  readonly logger: Logger;
  /** CRIT journald entries for dead-letter and integrity alerts; none when absent. */
  readonly emergencies?: Emergencies;
  /** sd_notify: READY=1 when /health turns 200, STOPPING=1 at shutdown. */
  readonly notify?: SdNotify;
  /** The clock, ms since the epoch; tests move it. Default Date.now. */
  readonly now?: () => number;
}

export interface Adapter {
  /** http://host:port it listens on (the real port when the setting asked for 0). */
  readonly url: string;
  /** Settles when the startup integrity check has run: resolves if it passed, else rejects. */
  readonly ready: Promise<void>;
  readonly metrics: AdapterMetrics;
  readonly retention: Retention;
  /** Stops intake, finishes and answers commits in flight, closes the database. */
  close(): Promise<void>;
}

/** Replay page size: default and most per request. */
const REPLAY_DEFAULT_LIMIT = 100;
const REPLAY_MAX_LIMIT = 1000;
/** How long shutdown waits for requests in flight before cutting their connections. */
const SHUTDOWN_GRACE_MS = 10_000;
const CHANNEL_PATH = /^\/v1\/channels\/([^/]+)\/messages$/;

export async function startAdapter(opts: AdapterOptions): Promise<Adapter> {
  const { settings, topology, logger } = opts;
  const now = opts.now ?? Date.now;
  mkdirSync(dirname(settings.db), { recursive: true });
  const store = new SqliteStore(settings.db, {
    sync: settings.sync,
    delivery: {
      capacity: settings.queueCapacity,
      leaseMs: settings.leaseMs,
      maxRetries: settings.maxRetries,
      retryBaseMs: settings.retryBaseMs,
      alertsTo: topology.alertsTo,
    },
  });
  store.ensureChannels(allChannels(topology));
  const metrics = new AdapterMetrics(store, [...topology.agents.keys()]);
  let delivery: DeliveryService | undefined;
  const commits = new GroupCommit(store, {
    onCommit: (s) => {
      metrics.commit(s);
      delivery?.afterCommit();
    },
    onError: (err) => {
      metrics.commitError();
      logger.error({ err }, 'group commit failed; its senders were told to retry');
    },
  });
  delivery = new DeliveryService({
    store,
    commits,
    now,
    logger,
    alertsTo: topology.alertsTo,
    onAlert: (a) => {
      const reason =
        a.kind === 'alert/integrity'
          ? 'integrity'
          : a.kind === 'alert/dead-letter'
            ? 'dead_letter'
            : undefined;
      if (reason === undefined) return;
      opts.emergencies?.raise({
        reason,
        message:
          reason === 'integrity'
            ? `stored message failed its checksum on ${a.payload.recipient}'s read`
            : `${a.payload.count} deliveries to ${a.payload.recipient} dead-lettered (${a.payload.reason})`,
        fields: {
          AGW_RECIPIENT: a.payload.recipient,
          AGW_DETAIL: a.payload.reason,
          AGW_COUNT: a.payload.count,
          AGW_MESSAGE_IDS: a.payload.message_ids.join(','),
        },
      });
    },
  });
  const retention = new Retention({
    store,
    commits,
    now,
    logger,
    days: settings.retentionDays,
    keepKinds: settings.retentionKeepKinds,
  });
  const ctx: WriteContext = {
    topology,
    store,
    commits,
    maxMessageBytes: settings.maxMessageBytes,
    now,
  };
  const routes = deliveryRoutes({ topology, store, commits, delivery, now });
  let ready = false;
  let closing = false;
  let inFlight = 0;
  let idle: (() => void) | undefined;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (path === '/health') {
      if (ready && !closing && store.corruption === undefined)
        return sendJson(res, 200, { status: 'ready' });
      throw new GatewayError(
        'not_ready',
        closing
          ? 'the adapter is shutting down'
          : store.corruption !== undefined
            ? `integrity: ${store.corruption}`
            : 'the store is not checked yet',
      );
    }
    if (path === '/metrics') {
      const text = await metrics.registry.metrics();
      res.writeHead(200, { 'content-type': metrics.registry.contentType });
      res.end(text);
      return;
    }
    if (closing)
      throw new GatewayError('shutting_down', 'the adapter is shutting down; retry shortly');
    if (!ready) throw new GatewayError('not_ready', 'the adapter is starting; retry shortly');
    const agent = authenticate(topology, req);
    try {
      await route(req, res, url, path, q, agent);
    } catch (err) {
      if (isGatewayError(err) && err.code === 'integrity_error')
        delivery.reportCorruption(agent, err);
      throw err;
    }
  };

  const route = async (
    req: IncomingMessage,
    res: ServerResponse,
    url: string,
    path: string,
    q: number,
    agent: string,
  ): Promise<void> => {
    const query = () => new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    if (path === '/v1/messages') {
      expectMethod(req, 'POST');
      const body = await readBody(req, settings.maxMessageBytes);
      const { status, ack } = await counted(metrics, postMessage(ctx, agent, body), (r) =>
        r.ack.duplicate ? 'duplicate' : 'created',
      );
      return sendJson(res, status, ack);
    }
    if (path === '/v1/messages/batch') {
      expectMethod(req, 'POST');
      // Each item is held to the single-message limit; the whole body to a batch of them.
      const body = await readBody(req, settings.maxMessageBytes * MAX_BATCH);
      const results = await counted(metrics, postBatch(ctx, agent, body), () => 'batch');
      return sendJson(res, 200, { results });
    }
    const channelPath = CHANNEL_PATH.exec(path);
    if (channelPath !== null) {
      expectMethod(req, 'GET');
      const channel = decodeURIComponent(channelPath[1]!);
      assertReader(topology, agent, channel);
      const params = query();
      const after = intParam(params, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
      const limit = intParam(params, 'limit', REPLAY_DEFAULT_LIMIT, 1, REPLAY_MAX_LIMIT);
      const rows = store.channelMessages(channel, after, limit);
      return sendJson(res, 200, `{"messages":[${rows.join(',')}]}`);
    }
    const answer = await routes(req, res, path, query, agent);
    if (answer !== undefined) return sendJson(res, answer.status ?? 200, answer.body);
    throw new GatewayError('not_found', `no endpoint ${req.method} ${path}`);
  };

  const server = createServer((req, res) => {
    inFlight++;
    if (closing) res.setHeader('connection', 'close');
    res.once('close', () => {
      if (--inFlight === 0) idle?.();
    });
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent || res.destroyed) {
        res.destroy();
        return;
      }
      if (isGatewayError(err)) return sendError(res, err);
      logger.error({ err, method: req.method, url: req.url }, 'request failed');
      sendError(res, new GatewayError('internal', 'the adapter failed to handle the request'));
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.listen.port, settings.listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;

  const readyPromise = store.quickCheck().then(async (problems) => {
    if (problems.length > 0) {
      throw new Error(
        `PRAGMA quick_check found ${problems.length} problem(s): ${problems.slice(0, 3).join('; ')}`,
      );
    }
    // What fell due while the adapter was down (expired leases, pending alerts) goes first.
    await delivery.start();
    retention.start();
    ready = true;
    await opts.notify?.ready();
  });
  // The caller decides what a failed check means (the CLI exits); no unhandled rejection here.
  readyPromise.catch(() => {});

  const close = async (): Promise<void> => {
    if (closing) return;
    closing = true;
    void opts.notify?.stopping();
    server.close();
    server.closeIdleConnections();
    retention.stop();
    // Parked polls answer now (empty); whatever was taken commits and is answered.
    delivery.stop();
    commits.flush();
    if (inFlight > 0) {
      await new Promise<void>((resolve) => {
        idle = resolve;
        setTimeout(resolve, SHUTDOWN_GRACE_MS).unref();
      });
    }
    commits.flush();
    server.closeAllConnections();
    store.close();
  };

  return { url, ready: readyPromise, metrics, retention, close };
}

function authenticate(topology: Topology, req: IncomingMessage): string {
  const header = req.headers.authorization;
  const token = header?.startsWith('Bearer ') ? header.slice(7).trim() : '';
  if (token === '') {
    throw new GatewayError('unauthorized', 'an Authorization: Bearer <token> header is required');
  }
  const agent = agentForTokenHash(topology, createHash('sha256').update(token).digest());
  if (agent === undefined)
    throw new GatewayError('unauthorized', 'the bearer token belongs to no agent');
  return agent.id;
}

async function counted<T>(
  metrics: AdapterMetrics,
  work: Promise<T>,
  outcome: (r: T) => string,
): Promise<T> {
  try {
    const r = await work;
    metrics.answered(outcome(r));
    return r;
  } catch (err) {
    metrics.answered(isGatewayError(err) ? err.code : 'internal');
    throw err;
  }
}
