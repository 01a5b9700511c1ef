/**
 * The adapter's HTTP server: wires the store it is given to the group commit, the delivery
 * service, retention and metrics; listens; runs the first sweep and turns ready while the store's
 * integrity check runs in the background; serves the route table (routes.ts). Shutdown stops
 * intake, lets commits in flight finish and answer, then closes the store.
 */

import type { IncomingMessage } from 'node:http';
import { hostname } from 'node:os';
import type { Server as TlsServer } from 'node:tls';
import type { Logger } from 'pino';
import type { Emergencies } from '../journald/emergency.js';
import type { SdNotify } from '../journald/sd-notify.js';
import { GatewayError } from '../protocol/errors.js';
import { createServer, type HttpShell } from '../protocol/http-server.js';
import { RouteTable } from '../protocol/router.js';
import { VERSION } from '../protocol/version.js';
import { type FileWatch, watchFiles } from '../protocol/watched-files.js';
import { StorageFailure, type Store } from '../store/store.js';
import { NO_TRACING, type Tracing } from '../telemetry/tracing.js';
import { checkAuditChain } from './audit-check.js';
import { ConnectionLimits } from './connection-limits.js';
import { Credentials, type ReloadResult } from './credentials.js';
import { traceDeadLetters } from './dead-letter-spans.js';
import { DeliveryService } from './delivery.js';
import { AdapterEventMap, watch } from './events.js';
import { GroupCommit } from './group-commit.js';
import { AdapterMetrics } from './metrics.js';
import { OperatorActs } from './operators.js';
import { ResponseBudget } from './response-budget.js';
import { Retention } from './retention.js';
import { adapterRoutes, type Caller, type Who } from './routes.js';
import { allChannels } from './routing.js';
import { loadSecurity, type Security } from './security.js';
import { SendRates } from './send-rate.js';
import type { AdapterSettings } from './settings.js';
import { StorageWatch } from './storage-health.js';
import { reloadTls, tlsFiles } from './tls-files.js';
import { operatorName, type Principal, type Topology } from './topology.js';

export interface AdapterOptions {
  /** Spans (telemetry/tracing.ts); default none. */
  readonly tracing?: Tracing;
  readonly settings: AdapterSettings;
  readonly topology: Topology;
  /** The store, opened by the caller (store/open.ts); the adapter closes it. */
  readonly store: Store;
  readonly logger: Logger;
  /** CRIT journald entries for dead-letter and integrity alerts; none when absent. */
  readonly emergencies?: Emergencies;
  /** The event map, for a caller that listens from the start (docs/reference/events.md). */
  readonly events?: AdapterEventMap;
  /** sd_notify: READY=1 when /health turns 200, STOPPING=1 at shutdown. */
  readonly notify?: SdNotify;
  /** The clock, ms since the epoch; tests move it. Default Date.now. */
  readonly now?: () => number;
  /**
   * While writes keep failing on the storage, how often a probe write is tried, ms (default
   * 5,000; storage-health.ts). Tests lengthen it to watch the failing state without a race.
   */
  readonly storageProbeMs?: number;
  /**
   * TLS and the JWT key set, loaded by the caller (the CLI, so that a bad file is exit 2);
   * default: loaded here from the settings (security.ts).
   */
  readonly security?: Security;
  /**
   * How often the topology, JWKS and TLS files are checked for a change, ms (default 1,000);
   * 0: never (reload() and SIGHUP still reload).
   */
  readonly fileWatchMs?: number;
}

export interface Adapter {
  /** http://host:port it listens on (the real port when the setting asked for 0). */
  readonly url: string;
  /** Resolves when /health turns 200: store open, first sweep done (`integrity` may still run). */
  readonly ready: Promise<void>;
  /**
   * Settles when the start's PRAGMA quick_check has run: resolves with its duration in ms if it
   * passed; else rejects with what it found, and /health has turned 503 for good.
   */
  readonly integrity: Promise<number>;
  readonly metrics: AdapterMetrics;
  /** What happens in the adapter, one typed event map (events.ts, docs/reference/events.md). */
  readonly events: AdapterEventMap;
  readonly retention: Retention;
  /** The HTTP shell: request hooks (onRequest, onResponse, onError) attach here. */
  readonly http: HttpShell;
  /** Who holds the connections; its events tell each one closed idle, evicted or refused. */
  readonly connections: ConnectionLimits;
  /** The answers in flight; its events tell each one cut for its client and each read refused. */
  readonly responses: ResponseBudget;
  /** The credentials in force; reloads replace them. */
  readonly credentials: Credentials;
  /**
   * Re-reads the topology's credentials, the JWKS and the TLS files (SIGHUP, a file changed);
   * what cannot be used is refused, logged and audited, and the old stays.
   */
  reload(cause: string): ReloadResult;
  /** Stops intake, finishes and answers commits in flight, closes the store. */
  close(): Promise<void>;
}

/** How long shutdown waits for requests in flight before cutting their connections. */
const SHUTDOWN_GRACE_MS = 10_000;

export async function startAdapter(opts: AdapterOptions): Promise<Adapter> {
  const { settings, topology, logger, store } = opts;
  const now = opts.now ?? Date.now;
  const security = opts.security ?? loadSecurity(settings, topology, now);
  await store.ensureChannels(allChannels(topology));
  // What happens, told once (events.ts): the log and the CRIT entries subscribe first
  const events = opts.events ?? new AdapterEventMap();
  watch(events, logger, opts.emergencies);
  const commits = new GroupCommit(store, { events });
  const metrics = new AdapterMetrics(store, commits, [...topology.agents.keys()]);
  const delivery = new DeliveryService({
    store,
    commits,
    now,
    logger,
    maxAttempts: 1 + settings.maxRetries,
    events,
    stalls: {
      agents: [...topology.agents.keys()],
      alertsTo: topology.alertsTo,
      stallMs: settings.stallS * 1000,
    },
  });
  if (delivery.stalls !== undefined) metrics.watchStalls(delivery.stalls);
  metrics.watchPolls((agent) => delivery.parkedPolls(agent));
  metrics.watchReplyWaits((agent) => delivery.parkedReplyWaits(agent));
  const storage = new StorageWatch({
    commits,
    logger,
    now,
    events,
    probeMs: opts.storageProbeMs,
  });
  const retention = new Retention({
    commits,
    now,
    logger,
    days: settings.retentionDays,
    keepKinds: settings.retentionKeepKinds,
    keepDays: settings.retentionKeepDays,
    auditDays: settings.auditRetentionDays,
  });
  const acts = new OperatorActs({ store, commits, now, logger });
  // the adapter's own audit entries (reloads, start and stop, failed authentication): after the
  // fact, so a failure to write one is logged and fails nothing else
  const audit = (entry: Parameters<OperatorActs['record']>[0]): Promise<void> =>
    acts.record(entry).then(
      () => {},
      (err: unknown) => logger.error({ err, audit: entry }, 'an audit entry could not be written'),
    );
  const credentials = new Credentials({
    topology,
    topologyPath: settings.topology,
    topologyOptions: { allowDevTokens: settings.allowDevTokens },
    ...(security.jwt === undefined ? {} : { jwt: security.jwt }),
    mtls: security.tls?.ca !== undefined,
    audit: (entry) => void audit(entry),
    logger,
    now,
  });
  traceDeadLetters(commits, store, opts.tracing ?? NO_TRACING, logger);
  const responses = new ResponseBudget(settings.maxResponseBytes, settings.writeTimeoutMs, events);
  let ready = false;
  let closing = false;
  let checkFailed: string | undefined;

  const table = new RouteTable<Who, Caller>(
    adapterRoutes({
      write: {
        topology,
        store,
        commits,
        maxMessageBytes: settings.maxMessageBytes,
        maxScheduleMs: settings.maxScheduleDays * 86_400_000,
        now,
        rates: sendRates(settings, topology, now),
        tracing: opts.tracing ?? NO_TRACING,
      },
      delivery,
      metrics,
      topology,
      maxLeaseMs: settings.maxLeaseMs,
      maxPageBytes: settings.maxPageBytes,
      maxPollsPerAgent: settings.maxPollsPerAgent,
      maxReadsPerAgent: settings.maxReadsPerAgent,
      responses,
      acts,
      console: settings.console === 'on',
      // 503 while starting or stopping, once quick_check failed, and while writes keep failing
      // on the storage. Not for a corrupt row (quarantined, the rest is served) nor a storage
      // bound reached (storage_full refuses new messages; everything else works).
      // On PostgreSQL also while the database cannot be reached or is at another schema version.
      health: async () => {
        const problem =
          checkFailed !== undefined
            ? `integrity: ${checkFailed}`
            : storage.failing !== undefined
              ? `storage: ${storage.failing}`
              : undefined;
        if (ready && !closing && problem === undefined) {
          try {
            await store.ping();
            return;
          } catch (err) {
            throw new GatewayError('not_ready', `store: ${(err as Error).message}`);
          }
        }
        throw new GatewayError(
          'not_ready',
          closing ? 'the adapter is shutting down' : (problem ?? 'the adapter is starting'),
        );
      },
    }),
  );
  const guard = (who: Who, req: IncomingMessage): Caller | Promise<Caller> => {
    if (who === 'public') return { agent: '', overseer: false, operator: undefined };
    if (closing)
      throw new GatewayError('shutting_down', 'the adapter is shutting down; retry shortly');
    if (!ready) throw new GatewayError('not_ready', 'the adapter is starting; retry shortly');
    const admit = (principal: Principal): Caller => {
      connections.trust(req.socket);
      return callerFor(topology, principal, who);
    };
    const principal = credentials.authenticate(req);
    return principal instanceof Promise ? principal.then(admit) : admit(principal);
  };

  // Within AGW_MAX_CONNECTIONS, what a peer that showed no token may hold (connection-limits.ts).
  const connections = new ConnectionLimits({
    maxConnections: settings.maxConnections,
    reservedPercent: settings.reservedConnectionsPercent,
    maxPerAddress: settings.maxConnectionsPerAddress,
    idleMs: settings.unauthenticatedIdleMs,
    events,
  });
  let http: HttpShell;
  try {
    http = await createServer({
      program: 'adapter',
      listen: settings.listen,
      // 4,096 connections is far above six agents' sidecars (16 long polls and 16 calls each)
      // and far below the file descriptors a pod gets
      limits: settings,
      ...(security.tls === undefined ? {} : { tls: security.tls }),
      table,
      guard,
      logger,
      // a read the store could not make (PostgreSQL down or restarting, a timeout): the same
      // request may succeed shortly, as a failed commit's storage_error says
      translate: (err) =>
        err instanceof StorageFailure
          ? new GatewayError('storage_error', `the message store could not be read; retry`, {
              cause: err,
            })
          : undefined,
    });
  } catch (err) {
    credentials.close();
    await store.close();
    throw err;
  }
  connections.attach(http.server);

  const reloadTlsFiles = (cause: string): ReloadResult => {
    if (settings.tlsCert === undefined || settings.tlsKey === undefined) return { taken: true };
    const target = 'AGW_TLS_CERT';
    let result: ReloadResult = { taken: true };
    try {
      reloadTls(http.server as unknown as TlsServer, tlsPaths(settings));
      logger.info({ cause }, `TLS certificate and key reloaded (${cause})`);
    } catch (err) {
      result = { taken: false, reason: (err as Error).message };
      logger.error(
        { cause },
        `TLS reload refused (${cause}): ${result.reason}; the certificate in use stays`,
      );
    }
    void audit({
      at: now(),
      actor: 'adapter',
      action: 'reload',
      target,
      detail: { cause, taken: result.taken, ...(result.reason ? { reason: result.reason } : {}) },
    });
    return result;
  };
  const reload = (cause: string): ReloadResult => {
    const creds = credentials.reload(cause);
    const tls = reloadTlsFiles(cause);
    if (!creds.taken) return creds;
    return tls;
  };
  const watchMs = opts.fileWatchMs ?? 1_000;
  const watches: FileWatch[] = [];
  if (watchMs > 0) {
    const credentialFiles = [settings.topology, ...(settings.jwtJwks ? [settings.jwtJwks] : [])];
    watches.push(
      watchFiles(credentialFiles, () => credentials.reload('file changed'), {
        intervalMs: watchMs,
      }),
    );
    if (settings.tlsCert !== undefined && settings.tlsKey !== undefined)
      watches.push(
        watchFiles(tlsFiles(tlsPaths(settings)), () => reloadTlsFiles('file changed'), {
          intervalMs: watchMs,
        }),
      );
  }
  const url = http.url;

  // quick_check reads every page: with 1M messages (2 GiB in page cache) it was most of a 1.75 s
  // restart to ready. It runs in its worker while the adapter serves; until it ends, the per-row
  // checksums still guard every body read.
  const checkStart = performance.now();
  const integrity = store.checkIntegrity().then((problems) => {
    const ms = Math.round(performance.now() - checkStart);
    if (problems.length === 0) return ms;
    const found = problems.slice(0, 3).join('; ');
    checkFailed = `PRAGMA quick_check found ${problems.length} problem(s) in ${ms} ms: ${found}`;
    throw new Error(checkFailed);
  });
  const readyPromise = (async () => {
    // What fell due while the adapter was down (expired leases, pending alerts) goes first.
    await delivery.start();
    await acts.start();
    retention.start();
    ready = true;
    void audit({
      at: now(),
      actor: 'adapter',
      action: 'start',
      target: hostname(),
      detail: { version: VERSION, pid: process.pid, url, tls: security.tls !== undefined },
    });
    // the audit log's chain, checked in the background (audit-check.ts): a break is an error
    // line, a CRIT entry (integrity) and an alert/integrity; the adapter goes on serving
    void checkAuditChain({ store, commits, logger, now });
    await opts.notify?.ready();
  })();
  // The caller decides what a failure means (the CLI exits); no unhandled rejection here.
  readyPromise.catch(() => {});
  integrity.catch(() => {});

  const close = async (): Promise<void> => {
    if (closing) return;
    closing = true;
    void opts.notify?.stopping();
    for (const w of watches) w.close();
    await http.close(SHUTDOWN_GRACE_MS, async () => {
      credentials.close();
      if (ready)
        await audit({
          at: now(),
          actor: 'adapter',
          action: 'stop',
          target: hostname(),
          detail: { pid: process.pid },
        });
      retention.stop();
      storage.stop();
      acts.close();
      // Parked polls answer now (empty); whatever was taken commits and is answered.
      delivery.stop();
      await commits.flush();
    });
    await commits.flush();
    // The check's worker holds its own read connection; the process cannot exit before the
    // worker ends anyway, and closing the store last lets it fold the WAL into the file.
    await integrity.catch(() => {});
    await store.close();
  };

  return {
    url,
    ready: readyPromise,
    integrity,
    metrics,
    events,
    retention,
    http,
    connections,
    responses,
    credentials,
    reload,
    close,
  };
}

function tlsPaths(settings: AdapterSettings) {
  return {
    cert: settings.tlsCert!,
    key: settings.tlsKey!,
    ...(settings.tlsClientCa === undefined ? {} : { clientCa: settings.tlsClientCa }),
  };
}

/** AGW_SEND_RATE / AGW_SEND_BURST, and the agents' own `send_rate` / `send_burst`. */
function sendRates(settings: AdapterSettings, topology: Topology, now: () => number): SendRates {
  const own = new Map(
    [...topology.agents.values()]
      .filter((a) => a.sendRate !== undefined || a.sendBurst !== undefined)
      .map((a) => [
        a.id,
        {
          ...(a.sendRate === undefined ? {} : { perSecond: a.sendRate }),
          ...(a.sendBurst === undefined ? {} : { burst: a.sendBurst }),
        },
      ]),
  );
  return new SendRates({
    defaults: { perSecond: settings.sendRate, burst: settings.sendBurst },
    own,
    now,
  });
}

/** Whether `principal` may call a route for `who` (routes.ts, Who), and as whom. */
export function callerFor(topology: Topology, principal: Principal, who: Who): Caller {
  if (principal.kind === 'operator') {
    const name = operatorName(principal.operator.id);
    if (who === 'agent')
      throw new GatewayError(
        'not_an_agent',
        `${name} is an operator: it has no inbox, leases or acks (an agent's token does)`,
      );
    return { agent: name, overseer: true, operator: name };
  }
  const agent = principal.agent.id;
  const overseer = agent === topology.alertsTo;
  if (who === 'operator')
    throw new GatewayError(
      'not_operator',
      `only an operator (topology \`operators\`) may do this; ${agent} is an agent`,
    );
  if (who === 'overseer' && !overseer)
    throw new GatewayError(
      'not_alerts_agent',
      `only ${topology.alertsTo} (alerts_to) or an operator may do this`,
    );
  return { agent, overseer, operator: undefined };
}
