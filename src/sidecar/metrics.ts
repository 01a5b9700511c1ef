/**
 * The sidecar's Prometheus metrics, read when /metrics is scraped: on the agent's port, and on a
 * listener of their own for Prometheus (AGW_METRICS_LISTEN, `serveMetrics` below).
 *
 * prom-client is loaded at the first scrape, not at start: loaded at start it is 1.3-3.6 MiB of
 * an idle sidecar's RSS (bench/sidecar/sidecar.mjs), which a pod nobody scrapes never needs,
 * and a scraped one pays once, ~15 ms more on its first /metrics.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { createServer, DEFAULT_LIMITS, type HttpShell } from '../protocol/http-server.js';
import { type Route, RouteTable } from '../protocol/router.js';
import { VERSION } from '../protocol/version.js';
import type { AdapterBreaker } from './circuit-breaker.js';
import type { SidecarEventMap } from './events.js';
import type { Outbox } from './outbox.js';

/** What /metrics serves: the text exposition and its content type. */
export interface SidecarMetrics {
  metrics(): Promise<string>;
  /** prom-client's Prometheus text format (version 0.0.4), the registry's once it is loaded. */
  readonly contentType: string;
}

/** prom-client's Registry.PROMETHEUS_CONTENT_TYPE, known before prom-client is loaded. */
const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export function sidecarMetrics(
  outbox: Outbox,
  breaker: AdapterBreaker,
  events: SidecarEventMap,
): SidecarMetrics {
  // counted from start, whether or not anyone scrapes
  let refusedFull = 0;
  events.on('outbox:full', () => refusedFull++);
  let loaded: Promise<Registry> | undefined;
  let registry: Registry | undefined;
  const load = async () => {
    const { Counter, Gauge, Registry } = await import('prom-client');
    const r = Registry.merge([await defaultMetrics()]);
    new Gauge({
      name: 'agw_build_info',
      help: 'The running build: its version (package.json) and the Node.js version; always 1.',
      labelNames: ['version', 'node'],
      registers: [r],
    }).set({ version: VERSION, node: process.version }, 1);
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [r],
        collect() {
          this.set(read());
        },
      });
    gauge('agw_sidecar_outbox_depth', 'Messages waiting in the outbox.', () => outbox.depth);
    gauge(
      'agw_sidecar_breaker_open',
      '1 when the circuit to the adapter is open, 0.5 half-open, 0 closed.',
      () => (breaker.state === 'open' ? 1 : breaker.state === 'half_open' ? 0.5 : 0),
    );
    // a total since start, counted from the events: a counter read at scrape time (prom-client's
    // Counter has no set; reset then inc within one synchronous collect is one)
    new Counter({
      name: 'agw_sidecar_outbox_full_total',
      help: 'Sends refused with 503 outbox_full since start.',
      registers: [r],
      collect() {
        this.reset();
        this.inc(refusedFull);
      },
    });
    gauge(
      'agw_sidecar_local_dead_letters',
      'Queued messages the adapter refused for good.',
      () => outbox.deadLetters,
    );
    registry = r;
    return r;
  };
  return {
    metrics: async () => {
      // a failed load (it never should: prom-client is a dependency) is tried again next scrape
      loaded ??= load().catch((err: unknown) => {
        loaded = undefined;
        throw err;
      });
      return (await loaded).metrics();
    },
    get contentType() {
      return registry?.contentType ?? PROMETHEUS_CONTENT_TYPE;
    },
  };
}

/**
 * prom-client's default gauges whose names end in `_total` (the count of active handles,
 * requests and resources): only counters may, and the same figures are there by type in
 * `nodejs_active_handles` and the like, which sum to them.
 */
const MISNAMED_DEFAULTS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

let processMetrics: Promise<Registry> | undefined;
/**
 * prom-client's default process and Node metrics (CPU, memory, file descriptors, event-loop lag,
 * heap, GC), made once per process at its first scrape and shared by every sidecar's registry:
 * they describe the process, and each set made keeps a GC observer and an event-loop monitor.
 */
function defaultMetrics(): Promise<Registry> {
  processMetrics ??= import('prom-client').then(({ collectDefaultMetrics, Registry }) => {
    const r = new Registry();
    collectDefaultMetrics({ register: r });
    for (const name of MISNAMED_DEFAULTS) r.removeSingleMetric(name);
    return r;
  });
  return processMetrics;
}

/**
 * The listener for Prometheus (AGW_METRICS_LISTEN): GET /metrics, the very route of the agent's
 * port, and nothing else (every other path is 404, so none of the agent API is reachable here).
 * It checks no Host and no Origin: the pod's address is what Prometheus dials, and what it
 * serves is what /metrics serves anyone on the agent's port, no token and no message in it
 * (docs/reference/adapter-api.md, "No token, and nothing secret", holds for the sidecar too).
 */
export async function serveMetrics<Who extends string>(opts: {
  readonly listen: { readonly host: string; readonly port: number };
  /** The sidecar's route table, of which GET /metrics is taken. */
  readonly routes: readonly Route<Who, undefined>[];
  readonly logger: Logger;
}): Promise<HttpShell> {
  const metrics = opts.routes.filter((r) => r.method === 'GET' && r.path === '/metrics');
  if (metrics.length !== 1) throw new Error('the route table has no GET /metrics');
  return createServer({
    program: 'sidecar',
    listen: opts.listen,
    // a scraper's requests: the adapter's slow-client bounds at their defaults, as the agent port
    limits: DEFAULT_LIMITS,
    table: new RouteTable(metrics),
    guard: () => undefined,
    logger: opts.logger,
  });
}
