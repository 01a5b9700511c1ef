/**
 * The sidecar's Prometheus metrics, read when /metrics is scraped.
 *
 * prom-client is loaded at the first scrape, not at start: loaded at start it is 1.3-3.6 MiB of
 * an idle sidecar's RSS (bench/sidecar/sidecar.mjs), which a pod nobody scrapes never needs,
 * and a scraped one pays once, ~15 ms more on its first /metrics.
 */
import type { Registry } from 'prom-client';
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
    const r = new Registry();
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
