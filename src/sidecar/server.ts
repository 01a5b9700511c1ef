/**
 * The gateway sidecar: the agent's only door, on localhost. Wires its file, the connection to
 * the adapter, the breaker, the forwarder, inbox repair and the start gate into the service
 * (service.ts), and serves the route table (routes.ts) over HTTP, the MCP tools at /mcp among it.
 */

import { mkdirSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import type { Emergencies } from '../journald/emergency.js';
import { GatewayError } from '../protocol/errors.js';
import { createServer, DEFAULT_LIMITS, type HttpShell } from '../protocol/http-server.js';
import { RouteTable } from '../protocol/router.js';
import { VERSION } from '../protocol/version.js';
import type { WatchOptions } from '../protocol/watched-files.js';
import { SidecarFile } from '../store/sidecar/sidecar-file.js';
import { NO_TRACING, type Tracing } from '../telemetry/tracing.js';
import { AdapterClient } from './adapter-client.js';
import { loadAdapterTls } from './adapter-tls.js';
import { Asks } from './ask.js';
import type { BackoffOptions } from './backoff.js';
import { AdapterBreaker, type StoredBreaker } from './circuit-breaker.js';
import { CredentialFiles } from './credential-files.js';
import { SidecarEventMap, watch } from './events.js';
import { Forwarder } from './forwarder.js';
import { StartGate } from './gate.js';
import { InboxRepair } from './inbox-repair.js';
import type { McpHandler } from './mcp-endpoint.js';
import { serveMetrics, sidecarMetrics } from './metrics.js';
import { Outbox } from './outbox.js';
import { checkLocalRequest, isLoopbackHost } from './request-checks.js';
import { sidecarRoutes, type Who } from './routes.js';
import { SidecarService } from './service.js';
import type { SidecarSettings } from './settings.js';

/** The longest wait between two probes of the start gate, ms. */
const GATE_MAX_MS = 5000;
export interface SidecarOptions {
  readonly settings: SidecarSettings;
  readonly logger: Logger;
  readonly emergencies: Emergencies;
  /**
   * The sidecar's event map (docs/reference/events.md), for a caller that listens from the
   * start: the program listens for 'fatal' (the token is another agent's) to stop and exit.
   * Default: a new map.
   */
  readonly events?: SidecarEventMap;
  /** Breaker and drain timing; defaults are the production ones. */
  readonly breaker?: { baseMs?: number; maxMs?: number; volumeThreshold?: number };
  /** Spans (telemetry/tracing.ts); default none. */
  readonly tracing?: Tracing;
  /**
   * How often the token file and the TLS files are looked at for a change (credential-files.ts);
   * default every second, 100 ms to settle.
   */
  readonly credentialWatch?: WatchOptions;
}

export interface Sidecar {
  readonly url: string;
  /**
   * http://host:port of the listener for Prometheus (AGW_METRICS_LISTEN; the real port when
   * asked for 0), undefined when it is off.
   */
  readonly metricsUrl: string | undefined;
  /** Resolves once the adapter's /health has answered 200 (the start gate opened). */
  readonly gateOpen: Promise<void>;
  readonly outbox: Outbox;
  /** What happens in the sidecar, after it happened (docs/reference/events.md). */
  readonly events: SidecarEventMap;
  /** The agent-facing operations, for other surfaces than HTTP. */
  readonly service: SidecarService;
  /** The HTTP shell: request hooks (onRequest, onResponse, onError) attach here. */
  readonly http: HttpShell;
  /** Stops taking sends, tries one drain within the grace period, closes. */
  close(): Promise<void>;
}

export async function startSidecar(opts: SidecarOptions): Promise<Sidecar> {
  const { settings, logger, emergencies } = opts;
  const events = opts.events ?? new SidecarEventMap();
  watch(events, logger, emergencies, settings.adapterUrl);
  mkdirSync(dirname(settings.outbox), { recursive: true });
  const file = new SidecarFile(settings.outbox, {
    onWriteError: (err) => events.emit('marks:write-error', err),
  });
  const outbox = new Outbox(file, settings.outboxCapacity);
  const timing: BackoffOptions = {
    baseMs: opts.breaker?.baseMs ?? 1000,
    maxMs: opts.breaker?.maxMs ?? 60_000,
  };
  // checked at start by the settings; loaded again here, the files being read when they change
  const tls =
    settings.adapterTls === undefined
      ? undefined
      : { files: settings.adapterTls, loaded: loadAdapterTls(settings.adapterTls) };
  const client = new AdapterClient({
    url: settings.adapterUrl,
    token: settings.agentToken,
    connectTimeoutMs: settings.adapterConnectTimeoutMs,
    ...(tls === undefined ? {} : { tls: tls.loaded.options }),
    logger,
  });
  const credentials = new CredentialFiles({
    client,
    logger,
    ...(settings.agentTokenFile === undefined
      ? {}
      : { token: { file: settings.agentTokenFile, value: settings.agentToken } }),
    ...(tls === undefined ? {} : { tls }),
    ...(opts.credentialWatch === undefined ? {} : { watch: opts.credentialWatch }),
  });
  const breaker = new AdapterBreaker({
    ...opts.breaker,
    load: () => file.getState<StoredBreaker>('breaker'),
    save: (s) => file.setState('breaker', s),
    events,
  });
  // every call the agent makes goes through the one breaker (the drain's too, in the forwarder)
  const upstream = breaker.guard(client);
  const repair = new InboxRepair(file, settings.agentId, upstream, events);
  const tracing = opts.tracing ?? NO_TRACING;
  const forwarder = new Forwarder({
    client,
    breaker,
    outbox,
    events,
    logger,
    backoff: timing,
    tracing,
  });
  events.on('send:assigned', (channel, seq) => repair.sent(channel, seq));
  // a reply an ask waits for, brought by an inbox poll, goes to the ask
  const asks = new Asks({ upstream, repair, outbox, events });
  repair.claim = (d) => asks.claim(d);
  const gate = new StartGate({
    client,
    // An agent waits on the gate: it probes /health at most GATE_MAX_MS apart (jittered), so an
    // adapter that comes up is seen within seconds, not after the breaker's 60 s cap.
    backoff: { baseMs: timing.baseMs, maxMs: Math.min(timing.maxMs, GATE_MAX_MS) },
    startupAlarmS: settings.startupAlarmS,
    events,
    check: async () => {
      // The adapter says who this token is: a token of another agent would send as that agent,
      // and one of no agent would move every queued message to the local dead letters.
      const res = await client.request('GET', '/v1/me').catch(() => undefined);
      if (res === undefined || res.retryable) return false;
      const me =
        res.status === 200
          ? (JSON.parse(res.body) as { agent?: string; limits?: { max_message_bytes?: number } })
          : {};
      if (me.agent === settings.agentId) {
        // what the adapter would refuse for good is refused at once, never queued
        const max = me.limits?.max_message_bytes;
        if (typeof max === 'number' && max > 0) forwarder.maxMessageBytes = max;
        return true;
      }
      // the adapter's own words on a 401: over mTLS it may be the client certificate it missed
      const said = res.status === 401 ? answerMessage(res.body) : undefined;
      const line =
        res.status === 401
          ? `AGW_AGENT_TOKEN: the adapter at ${settings.adapterUrl} knows no agent with this token${said === undefined ? '' : ` (it said: ${said})`}`
          : `AGW_AGENT_TOKEN: the adapter says this token is ${me.agent ?? `not usable (${res.status})`}'s, not AGW_AGENT_ID ${settings.agentId}'s`;
      logger.fatal({ adapter: settings.adapterUrl, agent: settings.agentId }, line);
      gate.stop();
      events.emit('fatal', line);
      return false;
    },
  });
  events.on('gate:open', () => {
    breaker.close();
    forwarder.kick();
  });
  const service = new SidecarService({
    tracing,
    agentId: settings.agentId,
    client,
    upstream,
    forwarder,
    repair,
    outbox,
    breaker,
    gate,
    emergencies,
    asks,
  });
  const metrics = sidecarMetrics(outbox, breaker, events);
  // The MCP SDK is loaded at the first POST /mcp: a sidecar whose agent uses the HTTP API never
  // pays for it (8-9 MiB of RSS on a 68 MiB sidecar, measured as the image runs it)
  let endpoint: Promise<McpHandler> | undefined;
  const mcp: McpHandler = async (req, res, body) => {
    endpoint ??= import('./mcp-endpoint.js').then((m) =>
      m.mcpEndpoint(service, {
        onError: (err, tool) => logger.error({ err, tool }, `the MCP tool ${tool} failed`),
      }),
    );
    return (await endpoint)(req, res, body);
  };
  const routes = sidecarRoutes(service, gate, metrics, settings.adapterUrl, mcp, VERSION);
  const table = new RouteTable<Who, undefined>(routes);

  const guard = (who: Who, req: IncomingMessage): undefined => {
    checkLocalRequest(req, settings.listen.host);
    if (who === 'agent' && http.closing)
      throw new GatewayError('shutting_down', 'the sidecar is stopping; retry shortly');
  };
  // The agent's runtime is the only client: the adapter's slow-client bounds at their defaults.
  const http = await createServer({
    program: 'sidecar',
    listen: settings.listen,
    limits: DEFAULT_LIMITS,
    table,
    guard,
    logger,
  });
  const url = http.url;
  /** What the sidecar opened besides its listeners, closed once they are. */
  const release = async () => {
    forwarder.stop();
    breaker.shutdown();
    credentials.close();
    await client.close();
    file.close();
  };
  if (!isLoopbackHost(settings.listen.host)) {
    // the request checks still hold (a loopback Host counts only on a loopback connection), but
    // whoever reaches this address may act as the agent: the sidecar takes no token
    logger.warn(
      { listen: url },
      `AGW_LISTEN ${settings.listen.host}:${settings.listen.port} is not a loopback address: anyone who can reach it can send, poll and ack as ${settings.agentId} (the sidecar takes no token); keep it on 127.0.0.1 unless the network around it is the boundary`,
    );
  }
  let metricsHttp: HttpShell | undefined;
  if (settings.metricsListen !== undefined) {
    const at = settings.metricsListen;
    try {
      metricsHttp = await serveMetrics({ listen: at, routes, logger });
    } catch (err) {
      // the address is taken or not this host's: nothing has started yet but the agent's port
      await http.close(0);
      await release();
      throw new Error(`AGW_METRICS_LISTEN ${at.host}:${at.port}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    logger.info(
      { metrics: `${metricsHttp.url}/metrics` },
      `metrics for Prometheus at ${metricsHttp.url}/metrics (AGW_METRICS_LISTEN)`,
    );
  }
  gate.start();

  return {
    url,
    metricsUrl: metricsHttp?.url,
    gateOpen: gate.opened,
    outbox,
    events,
    service,
    http,
    close: async () => {
      if (http.closing) return;
      // One last drain within the grace period, while the agent's calls in flight finish (a
      // parked poll is given up upstream and answers 503 shutting_down); what is left stays on
      // disk for the next start.
      await http.close(settings.shutdownGraceMs, async () => {
        gate.stop();
        forwarder.kick();
        await forwarder.settled();
      });
      // Prometheus may scrape until the last drain is done: it shows the outbox emptying
      await metricsHttp?.close(0);
      await release();
    },
  };
}

/** The `message` of an error answer (`{"error", "message"}`), if it has one. */
function answerMessage(body: string): string | undefined {
  try {
    const m = (JSON.parse(body) as { message?: unknown } | null)?.message;
    return typeof m === 'string' ? m : undefined;
  } catch {
    return undefined; // not ours: a proxy's page
  }
}
