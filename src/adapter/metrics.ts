/**
 * The adapter's Prometheus metrics, on a registry of its own so that several adapters in one
 * process (tests) do not share counters. Commit figures are observed once per commit; the
 * delivery counters are read from the store's tallies when /metrics is scraped.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { isGatewayError } from '../protocol/errors.js';
import type { Store } from '../store/store.js';
import type { GroupCommit } from './group-commit.js';

export class AdapterMetrics {
  readonly registry = new Registry();
  readonly #messages = new Counter({
    name: 'agw_messages_total',
    help: 'Messages answered by the write path, by outcome (created, duplicate, or an error code).',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly #commitSize = new Histogram({
    name: 'agw_commit_messages',
    help: 'Messages per group commit (one transaction, one fsync).',
    buckets: [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    registers: [this.registry],
  });
  readonly #commitSeconds = new Histogram({
    name: 'agw_commit_seconds',
    help: 'Time a group commit holds the event loop: statements, COMMIT and fsync.',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
    registers: [this.registry],
  });
  readonly #commitErrors = new Counter({
    name: 'agw_commit_errors_total',
    help: 'Group commits whose transaction failed and rolled back.',
    registers: [this.registry],
  });

  constructor(store: Store, commits: GroupCommit, agents: readonly string[]) {
    commits.on('commit', (s) => {
      this.#commitSize.observe(s.messages);
      this.#commitSeconds.observe(s.seconds);
    });
    commits.on('commit:error', () => this.#commitErrors.inc());
    const stats = store.stats;
    const tally = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(read());
        },
      });
    // Totals since start, exposed as gauges read at scrape time (counters cannot be set).
    tally(
      'agw_deliveries_enqueued_total',
      'Delivery rows created (one per recipient).',
      () => stats.enqueued,
    );
    tally(
      'agw_deliveries_handed_out_total',
      'Deliveries leased to their agent.',
      () => stats.handedOut,
    );
    tally('agw_redeliveries_total', 'Hand-outs after the first attempt.', () => stats.redelivered);
    tally('agw_acks_total', 'Deliveries acked.', () => stats.acked);
    tally('agw_alerts_total', 'Alerts sent to the alerts_to agent.', () => stats.alerts);
    new Gauge({
      name: 'agw_dead_letters_total',
      help: 'Dead letters since start, by reason.',
      labelNames: ['reason'],
      registers: [this.registry],
      collect() {
        for (const [reason, n] of Object.entries(stats.deadLetters)) this.set({ reason }, n);
      },
    });
    new Gauge({
      name: 'agw_queue_depth',
      help: 'Pending plus leased deliveries per agent.',
      labelNames: ['agent'],
      registers: [this.registry],
      collect() {
        for (const agent of agents) this.set({ agent }, store.depth(agent).all);
      },
    });
  }

  /** Counts the write path's answer: `outcome` of a success, else the error's code. */
  async counted<T>(work: Promise<T>, outcome: (r: T) => string): Promise<T> {
    try {
      const r = await work;
      this.#messages.inc({ outcome: outcome(r) });
      return r;
    } catch (err) {
      this.#messages.inc({ outcome: isGatewayError(err) ? err.code : 'internal' });
      throw err;
    }
  }
}
