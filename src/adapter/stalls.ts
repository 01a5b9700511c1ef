/**
 * Stalled agents (docs/design/delivery.md, "Alerts"): an agent whose queue holds a ready delivery
 * and that has not polled for AGW_STALL_S is stalled. The adapter tells alerts_to (`alert/stalled`,
 * payload `{ reason, recipient, pending, last_poll }`) and writes a CRIT entry (reason `stalled`),
 * once per stall: a new stall of the same agent begins only after it polled again. A consumer that
 * stopped silently is what users of comparable systems miss most (NATS, Dapr issues).
 *
 * What counts as polling: a GET /v1/inbox (while one is parked, the agent is polling), and an
 * ack, a nack or a lease extension, which show the agent at work on what it took (an agent busy
 * with one long task extends its lease rather than polling). A heartbeat does not count: a
 * process that answers heartbeats but never takes its messages is exactly a stalled consumer.
 *
 * Stalled for: since the later of its last poll and the moment its oldest pending delivery was
 * ready, so an agent that was idle for an hour is not stalled the moment a message arrives.
 * Polls are known in memory: after a restart, every agent's clock starts at the adapter's start.
 *
 * The check runs on a timer of its own, every quarter of AGW_STALL_S (at most 30 s). An agent
 * with an empty queue (Store.depth, in memory) or a poll within AGW_STALL_S costs nothing; for
 * the others one indexed read (Store.oldestPendingAt, ~9 µs on SQLite with 1,000 pending, where
 * a GROUP BY over every pending row took 64 ms at 100,000). A stall is noticed between
 * AGW_STALL_S and 1.25 × AGW_STALL_S after it began.
 */
import type { Logger } from 'pino';
import { ADAPTER_SENDER } from '../protocol/envelope.js';
import { uuidv7 } from '../protocol/ids.js';
import type { Store } from '../store/store.js';
import type { AdapterEventMap } from './events.js';
import type { GroupCommit } from './group-commit.js';

/** The alert's payload (docs/design/delivery.md, "Alerts"). */
export interface StalledPayload {
  readonly reason: 'stalled';
  readonly recipient: string;
  /** Its deliveries not yet acked (handed out or not), as the heartbeat counts them. */
  readonly pending: number;
  /** ISO 8601 time of its last poll; null when it has not polled since the adapter started. */
  readonly last_poll: string | null;
}

export interface StallOptions {
  readonly store: Pick<Store, 'depth' | 'oldestPendingAt'>;
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
  /** Where a stall is told (`agent:stalled`: its log line and CRIT entry, events.ts). */
  readonly events?: AdapterEventMap | undefined;
  /** The agent alerts go to. */
  readonly alertsTo: string;
  /** The topology's agents: only they can stall. */
  readonly agents: readonly string[];
  /** AGW_STALL_S in ms. Default 120,000. */
  readonly stallMs?: number;
  /** Whether a poll of `agent` is parked now, waiting for a delivery: it is polling. */
  readonly polling?: (agent: string) => boolean;
}

/** How often the check runs: a quarter of the stall time, at least 250 ms, at most 30 s. */
export function checkIntervalMs(stallMs: number): number {
  return Math.min(30_000, Math.max(250, Math.floor(stallMs / 4)));
}

export class StallWatch {
  readonly #o: StallOptions;
  readonly #stallMs: number;
  readonly #agents: ReadonlySet<string>;
  /** Each agent's last poll (or ack, nack, lease extension), ms. */
  readonly #lastPoll = new Map<string, number>();
  readonly #polling: (agent: string) => boolean;
  /** Agents alerted for the stall they are in now; a poll ends it. */
  readonly #alerted = new Set<string>();
  #startedAt: number;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(opts: StallOptions) {
    this.#o = opts;
    this.#stallMs = opts.stallMs ?? 120_000;
    this.#agents = new Set(opts.agents);
    this.#polling = opts.polling ?? (() => false);
    this.#startedAt = opts.now();
  }

  /** Starts the clock of every agent that has not polled yet, and the check's timer. */
  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#startedAt = this.#o.now();
    this.#schedule();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /**
   * `agent` polled (a poll began, or a parked one ended), acked, nacked or extended a lease: any
   * stall of it is over.
   */
  active(agent: string): void {
    this.#lastPoll.set(agent, this.#o.now());
    this.#alerted.delete(agent);
  }

  /**
   * When `agent` last polled, ms: now while a poll of it is in progress; undefined when it has
   * not polled since the adapter started.
   */
  lastPollAt(agent: string): number | undefined {
    if (this.#polling(agent)) return this.#o.now();
    return this.#lastPoll.get(agent);
  }

  /** Agents alerted for the stall they are in now. */
  get stalled(): ReadonlySet<string> {
    return this.#alerted;
  }

  /** One check: alerts for every agent that has just become stalled. */
  async check(): Promise<void> {
    const now = this.#o.now();
    for (const agent of this.#agents) {
      if (this.#stopped) return;
      if (this.#alerted.has(agent) || this.#polling(agent)) continue;
      const lastPoll = this.#lastPoll.get(agent);
      // the cheap tests first: polled lately, or nothing in its queue
      if (now - (lastPoll ?? this.#startedAt) < this.#stallMs) continue;
      const pending = (await this.#o.store.depth(agent)).all;
      if (pending === 0) continue;
      const readyAt = await this.#o.store.oldestPendingAt(agent);
      if (readyAt === undefined || now - readyAt < this.#stallMs) continue;
      const stalledMs = now - Math.max(lastPoll ?? this.#startedAt, readyAt);
      await this.#alert(agent, pending, lastPoll, stalledMs, now);
    }
  }

  /**
   * How long the agent's oldest pending delivery has waited for it (0: none), ms: for /metrics.
   */
  async oldestPendingAgeMs(agent: string): Promise<number> {
    if ((await this.#o.store.depth(agent)).all === 0) return 0;
    const readyAt = await this.#o.store.oldestPendingAt(agent);
    return readyAt === undefined ? 0 : Math.max(0, this.#o.now() - readyAt);
  }

  /**
   * The alert is a message from the adapter to alerts_to, written through the group commit like
   * every message (numbered, durable, its recipient woken). It is marked sent only once
   * committed: a failed write is tried again at the next check.
   */
  async #alert(
    agent: string,
    pending: number,
    lastPoll: number | undefined,
    stalledMs: number,
    now: number,
  ): Promise<void> {
    const payload: StalledPayload = {
      reason: 'stalled',
      recipient: agent,
      pending,
      last_poll: lastPoll === undefined ? null : new Date(lastPoll).toISOString(),
    };
    const alertsTo = this.#o.alertsTo;
    const [outcome] = await this.#o.commits.run({
      op: 'append',
      drafts: [
        {
          sender: ADAPTER_SENDER,
          idempotencyKey: uuidv7(now),
          fingerprint: Buffer.alloc(32),
          channel: `@${alertsTo}`,
          kind: 'alert/stalled',
          priority: 'critical',
          replyTo: null,
          payloadJson: JSON.stringify(payload),
          receivedAt: now,
          recipients: [alertsTo],
        },
      ],
    });
    if (outcome?.status !== 201) {
      const why = outcome?.status === 'rejected' ? outcome.error.message : 'not stored';
      this.#o.logger.error({ agent }, `could not send alert/stalled: ${why}`);
      return;
    }
    this.#o.events?.emit('agent:stalled', {
      agent,
      pending,
      lastPoll: payload.last_poll ?? null,
      stalledS: Math.round(stalledMs / 1000),
    });
    // Unless it polled while the alert was being committed, which ended this stall already.
    if (this.#lastPoll.get(agent) === lastPoll && !this.#polling(agent)) this.#alerted.add(agent);
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.check()
        .catch((err: unknown) => this.#o.logger.error({ err }, 'stall check failed'))
        .finally(() => this.#schedule());
    }, checkIntervalMs(this.#stallMs));
    // the server keeps the process alive; this timer alone never should
    this.#timer.unref();
  }
}
