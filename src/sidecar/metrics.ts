/**
 * The sidecar's Prometheus metrics, read when /metrics is scraped.
 */
import { Gauge, Registry } from 'prom-client';
import type { AdapterBreaker } from './circuit-breaker.js';
import type { Forwarder } from './forwarder.js';
import type { Outbox } from './outbox.js';

export function sidecarMetrics(outbox: Outbox, breaker: AdapterBreaker, forwarder: Forwarder) {
  const registry = new Registry();
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
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
  gauge(
    'agw_sidecar_outbox_full_total',
    'Sends refused with 503 outbox_full since start.',
    () => forwarder.refusedFull,
  );
  gauge(
    'agw_sidecar_local_dead_letters',
    'Queued messages the adapter refused for good.',
    () => outbox.deadLetters,
  );
  return registry;
}
