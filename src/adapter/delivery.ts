/**
 * Delivery: the one door to deliveries. The long-poll inbox, acks and nacks, heartbeats, the
 * alerts_to agent's view of agents and dead letters, and the timer that turns expired leases
 * into failed attempts, makes retries ready and sends aggregated alerts.
 *
 * A waiting poll is woken in-process: every commit's effects name the agents that were given
 * new deliveries in it, and each of their waiters leases again. No polling loop. The timer is
 * armed for the next moment something falls due (a lease expiry, a retry's backoff end, an
 * alert window), never on a fixed tick, and re-armed only when a commit says timing changed.
 */
import type { Logger } from 'pino';
import type { Emergencies } from '../journald/emergency.js';
import type { LeaseExtension, Nack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import type {
  AgentState,
  CommitEffects,
  DeliveryJson,
  OpResults,
  SentAlert,
  Store,
} from '../store/store.js';
import type { GroupCommit } from './group-commit.js';

interface Waiter {
  readonly wake: (woken: boolean) => void;
}

export interface DeliveryOptions {
  readonly store: Store;
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
  /** CRIT journald entries for dead-letter and integrity alerts; none when absent. */
  readonly emergencies?: Emergencies;
}

export class DeliveryService {
  readonly #store: Store;
  readonly #commits: GroupCommit;
  readonly #now: () => number;
  readonly #logger: Logger;
  readonly #emergencies: Emergencies | undefined;
  readonly #waiters = new Map<string, Set<Waiter>>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #stopped = false;

  constructor(opts: DeliveryOptions) {
    this.#store = opts.store;
    this.#commits = opts.commits;
    this.#now = opts.now;
    this.#logger = opts.logger;
    this.#emergencies = opts.emergencies;
    this.#commits.on('commit', (_stats, effects) => this.#afterCommit(effects));
  }

  /** Sweeps what fell due while the adapter was down, then keeps the timer armed. */
  start(): Promise<void> {
    return this.#sweep();
  }

  /** Stops the timer and answers every parked poll with what it has (nothing). */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    for (const set of this.#waiters.values()) for (const w of set) w.wake(false);
    this.#waiters.clear();
  }

  /**
   * Up to `max` of the agent's ready deliveries, leased; waits up to waitS seconds for one to
   * arrive when there are none. `closed` settles when the client goes away.
   */
  async inbox(
    agent: string,
    waitS: number,
    max: number,
    closed: Promise<unknown>,
  ): Promise<DeliveryJson[]> {
    const deadline = this.#now() + waitS * 1000;
    let gone = false;
    closed.then(() => {
      gone = true;
    });
    for (;;) {
      const got = await this.#commits.run({ op: 'lease', agent, max, now: this.#now() });
      if (got.length > 0 || gone || this.#stopped) return got;
      const left = deadline - this.#now();
      if (left <= 0) return [];
      if (!(await this.#park(agent, left, closed))) return [];
    }
  }

  async ack(agent: string, ids: readonly number[]) {
    const r = await this.#commits.run({ op: 'ack', agent, ids });
    return { acked: r.acked, dead_lettered: r.dead, unknown: r.unknown };
  }

  /** Failed attempts; with `retry` false, dead letters at once (`rejected`, `reason` kept). */
  nack(agent: string, n: Nack): Promise<OpResults['nack']> {
    return this.#commits.run({
      op: 'nack',
      agent,
      ids: n.ids,
      retry: n.retry,
      reason: n.reason,
      now: this.#now(),
    });
  }

  /** The agent is still working: each lease now ends extendMs from now. */
  async extend(agent: string, e: LeaseExtension) {
    const leases = await this.#commits.run({
      op: 'extend',
      agent,
      ids: e.ids,
      extendMs: e.extendMs,
      now: this.#now(),
    });
    return { leases };
  }

  /** For its sender and the alerts_to agent: the message and each recipient's state. */
  messageStatus(agent: string, messageId: string, alertsTo: string): string {
    const s = this.#store.messageStatus(messageId);
    if (s === undefined) throw new GatewayError('unknown_message', `no message ${messageId}`);
    if (agent !== s.sender && agent !== alertsTo) {
      throw new GatewayError(
        'not_your_message',
        `only the sender of ${messageId} (or ${alertsTo}, alerts_to) may ask what became of it`,
      );
    }
    return `{"message":${s.message},"recipients":${JSON.stringify(s.recipients)}}`;
  }

  heartbeat(agent: string): Promise<OpResults['heartbeat']> {
    return this.#commits.run({ op: 'heartbeat', agent, now: this.#now() });
  }

  agents(ids: Iterable<string>): AgentState[] {
    return this.#store.agents(ids);
  }

  deadLetters(after: number, limit: number): string[] {
    return this.#store.deadLetters(after, limit);
  }

  replayDeadLetter(id: number): Promise<OpResults['replay_dead_letter']> {
    return this.#commits.run({ op: 'replay_dead_letter', id, now: this.#now() });
  }

  /**
   * A stored message failed its checksum on `agent`'s read: log at fatal and alert alerts_to
   * (aggregated like every alert). /health reads the store's corruption flag.
   */
  reportCorruption(agent: string, err: GatewayError): void {
    this.#logger.fatal({ agent, detail: this.#store.corruption }, `integrity: ${err.message}`);
    const messageId = this.#store.corruption ?? '';
    this.#commits
      .run({
        op: 'alert',
        recipient: agent,
        reason: 'checksum_mismatch',
        messageId,
        now: this.#now(),
      })
      .catch((e: unknown) => this.#logger.error({ err: e }, 'could not raise the integrity alert'));
  }

  #afterCommit(fx: CommitEffects): void {
    for (const alert of fx.alerts) this.#raise(alert);
    for (const agent of fx.woken) this.#wake(agent);
    if (fx.timingChanged) this.#arm();
  }

  /** Dead-letter and integrity alerts also go to journald as CRIT entries. */
  #raise(a: SentAlert): void {
    const reason =
      a.kind === 'alert/integrity'
        ? 'integrity'
        : a.kind === 'alert/dead-letter'
          ? 'dead_letter'
          : undefined;
    if (reason === undefined) return;
    this.#emergencies?.raise({
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
  }

  #park(agent: string, ms: number, closed: Promise<unknown>): Promise<boolean> {
    return new Promise((resolve) => {
      let set = this.#waiters.get(agent);
      if (set === undefined) {
        set = new Set();
        this.#waiters.set(agent, set);
      }
      const waiters = set;
      const waiter: Waiter = {
        wake: (woken) => {
          clearTimeout(timer);
          waiters.delete(waiter);
          resolve(woken);
        },
      };
      const timer = setTimeout(() => waiter.wake(false), ms);
      waiters.add(waiter);
      closed.then(() => waiter.wake(false));
    });
  }

  #wake(agent: string): void {
    const set = this.#waiters.get(agent);
    if (set === undefined) return;
    for (const w of [...set]) w.wake(true);
  }

  #arm(): void {
    if (this.#stopped) return;
    const due = this.#store.nextDue(this.#now());
    if (due === undefined || due >= this.#timerAt) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = due;
    // +1 ms: fire once the moment has passed, not a hair before it
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#timerAt = Number.POSITIVE_INFINITY;
        this.#sweep().catch((err: unknown) => this.#logger.error({ err }, 'delivery sweep failed'));
      },
      Math.max(0, due - this.#now()) + 1,
    );
  }

  async #sweep(): Promise<void> {
    await this.#commits.run({ op: 'sweep', now: this.#now() });
    // Retries whose backoff ended are ready now: every parked poll looks again.
    for (const agent of [...this.#waiters.keys()]) this.#wake(agent);
    this.#arm();
  }
}
