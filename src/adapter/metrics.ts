/**
 * The adapter's Prometheus metrics, on a registry of its own so that several adapters in one
 * process (tests) do not share counters. Commit figures are observed once per commit; the
 * delivery counters are read from the store's tallies when /metrics is scraped.
 *
 * Names follow Prometheus' conventions: base units in the name (`_seconds`, `_bytes`), `_total`
 * on counters and only on them, `_timestamp_seconds` for a moment as Unix time.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { isGatewayError } from '../protocol/errors.js';
import { VERSION } from '../protocol/version.js';
import type { Store } from '../store/store.js';
import type { GroupCommit } from './group-commit.js';
import type { BatchResult } from './messages.js';
import type { StallWatch } from './stalls.js';

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

let processMetrics: Registry | undefined;
/**
 * prom-client's default process and Node metrics (CPU, memory, file descriptors, event-loop lag,
 * heap, GC), made once per process and shared by every adapter's registry: they describe the
 * process, and each set made keeps a GC observer and an event-loop monitor for good.
 */
function defaultMetrics(): Registry {
  if (processMetrics !== undefined) return processMetrics;
  const r = new Registry();
  collectDefaultMetrics({ register: r });
  for (const name of MISNAMED_DEFAULTS) r.removeSingleMetric(name);
  processMetrics = r;
  return r;
}

export class AdapterMetrics {
  /** This adapter's metrics, after the process's own (prom-client's defaults). */
  readonly registry = Registry.merge([defaultMetrics()]);
  readonly #messages = new Counter({
    name: 'agw_messages_total',
    help: 'Messages answered by the write path, by outcome (created, duplicate, or an error code); each message of a batch counts.',
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

  readonly #agents: readonly string[];

  constructor(store: Store, commits: GroupCommit, agents: readonly string[]) {
    this.#agents = agents;
    commits.on('commit', (s) => {
      this.#commitSize.observe(s.messages);
      this.#commitSeconds.observe(s.seconds);
    });
    commits.on('commit:error', () => this.#commitErrors.inc());
    const stats = store.stats;
    const registers = [this.registry];
    new Gauge({
      name: 'agw_build_info',
      help: 'The running build: its version (package.json) and the Node.js version; always 1.',
      labelNames: ['version', 'node'],
      registers,
    }).set({ version: VERSION, node: process.version }, 1);
    // Totals since start, kept by the store: counters whose value is read at scrape time.
    // (prom-client's Counter has no set; reset then inc within one synchronous collect is one.)
    const total = (name: string, help: string, read: () => number) =>
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    total(
      'agw_deliveries_enqueued_total',
      'Delivery rows created (one per recipient).',
      () => stats.enqueued,
    );
    total(
      'agw_deliveries_handed_out_total',
      'Deliveries leased to their agent.',
      () => stats.handedOut,
    );
    total('agw_redeliveries_total', 'Hand-outs after the first attempt.', () => stats.redelivered);
    total('agw_acks_total', 'Deliveries acked.', () => stats.acked);
    total(
      'agw_alerts_total',
      'Aggregated alerts (dead letters, overruns, integrity) sent to the alerts_to agent.',
      () => stats.alerts,
    );
    new Counter({
      name: 'agw_dead_letters_total',
      help: 'Dead letters since start, by reason.',
      labelNames: ['reason'],
      registers,
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(stats.deadLetters)) this.inc({ reason }, n);
      },
    });
    new Gauge({
      name: 'agw_queue_depth',
      help: 'Pending plus leased deliveries per agent.',
      labelNames: ['agent'],
      registers,
      async collect() {
        const depths = await Promise.all(agents.map((agent) => store.depth(agent)));
        agents.forEach((agent, i) => {
          this.set({ agent }, depths[i]!.all);
        });
      },
    });
  }

  /**
   * Each agent's long polls parked at this adapter now: a sidecar keeps about one per agent
   * waiting; none while the agent is busy or gone. (It also shows that a poll given up by its
   * client ends here at once, without leasing: test/sidecar/abandoned-poll.test.ts.)
   */
  watchPolls(parked: (agent: string) => number): void {
    const agents = this.#agents;
    new Gauge({
      name: 'agw_agent_parked_polls',
      help: 'Long polls of each agent parked at this adapter now, waiting for a delivery.',
      labelNames: ['agent'],
      registers: [this.registry],
      collect() {
        for (const agent of agents) this.set({ agent }, parked(agent));
      },
    });
  }

  /**
   * Each agent's waits for an ask's reply parked at this adapter now (GET
   * /v1/messages/{id}/reply): one per ask its sidecar is waiting out.
   */
  watchReplyWaits(parked: (agent: string) => number): void {
    const agents = this.#agents;
    new Gauge({
      name: 'agw_agent_parked_reply_waits',
      help: "Waits of each agent for an ask's reply parked at this adapter now.",
      labelNames: ['agent'],
      registers: [this.registry],
      collect() {
        for (const agent of agents) this.set({ agent }, parked(agent));
      },
    });
  }

  /**
   * Each agent's oldest pending age and last poll (stalls.ts), and the stalls alerted: what an
   * operator's own alert rules need (`agw_agent_oldest_pending_age_seconds > 120`).
   */
  watchStalls(stalls: StallWatch): void {
    const agents = this.#agents;
    const registers = [this.registry];
    new Gauge({
      name: 'agw_agent_oldest_pending_age_seconds',
      help: 'How long the oldest pending delivery of each agent has waited since it was ready (0: none).',
      labelNames: ['agent'],
      registers,
      async collect() {
        const ages = await Promise.all(agents.map((agent) => stalls.oldestPendingAgeMs(agent)));
        agents.forEach((agent, i) => {
          this.set({ agent }, ages[i]! / 1000);
        });
      },
    });
    new Gauge({
      name: 'agw_agent_last_poll_timestamp_seconds',
      help: 'When each agent last polled, acked, nacked or extended a lease, Unix time (now while a poll is parked; 0: not since the adapter started).',
      labelNames: ['agent'],
      registers,
      collect() {
        for (const agent of agents) this.set({ agent }, (stalls.lastPollAt(agent) ?? 0) / 1000);
      },
    });
    new Gauge({
      name: 'agw_agent_stalled',
      help: '1 while an agent is in a stall it was alerted for (alert/stalled), else 0.',
      labelNames: ['agent'],
      registers,
      collect() {
        for (const agent of agents) this.set({ agent }, stalls.stalled.has(agent) ? 1 : 0);
      },
    });
  }

  /**
   * Counts the write path's answer, once per message: `outcome` of a success, else the error's
   * code. A batch's results (an array, one per message) count each message by its own result:
   * `created` (201), `duplicate` (200) or its error code, whatever `outcome` says; a batch
   * refused whole (a body that is no batch, a commit that failed) counts once, by its code.
   */
  async counted<T>(work: Promise<T>, outcome: (r: T) => string): Promise<T> {
    try {
      const r = await work;
      if (Array.isArray(r))
        for (const item of r) this.#messages.inc({ outcome: itemOutcome(item) });
      else this.#messages.inc({ outcome: outcome(r) });
      return r;
    } catch (err) {
      this.#messages.inc({ outcome: isGatewayError(err) ? err.code : 'internal' });
      throw err;
    }
  }
}

/** One batch item's outcome: its error code, else created or duplicate. */
function itemOutcome(item: BatchResult): string {
  if ('error' in item) return item.error;
  return item.duplicate ? 'duplicate' : 'created';
}
