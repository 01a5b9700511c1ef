/**
 * Delivery: the long-poll inbox, acks and nacks, and the timer that turns expired leases into
 * failed attempts, makes retries ready and sends aggregated alerts.
 *
 * A waiting poll is woken in-process: after every commit, the agents that were given new
 * deliveries in it have their waiters woken, and each waiter leases again. No polling loop.
 * The timer is armed for the next moment something falls due (a lease expiry, a retry's
 * backoff end, an alert window), never on a fixed tick.
 */
import type { Logger } from 'pino';
import type { GatewayError } from '../protocol/errors.js';
import type { SentAlert } from '../store/sqlite-deliveries.js';
import type { DeliveryJson, SqliteStore } from '../store/sqlite-store.js';
import type { GroupCommit } from './group-commit.js';

/** The longest a poll may wait (CONTRACT.md). */
export const MAX_WAIT_S = 30;

interface Waiter {
  readonly wake: (woken: boolean) => void;
}

export interface DeliveryOptions {
  readonly store: SqliteStore;
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
  readonly alertsTo: string;
  /** Each alert sent to alerts_to, once its transaction has committed. */
  readonly onAlert?: (alert: SentAlert) => void;
}

export class DeliveryService {
  readonly #store: SqliteStore;
  readonly #commits: GroupCommit;
  readonly #now: () => number;
  readonly #logger: Logger;
  readonly #alertsTo: string;
  readonly #onAlert: ((alert: SentAlert) => void) | undefined;
  readonly #waiters = new Map<string, Set<Waiter>>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #stopped = false;

  constructor(opts: DeliveryOptions) {
    this.#store = opts.store;
    this.#commits = opts.commits;
    this.#now = opts.now;
    this.#logger = opts.logger;
    this.#alertsTo = opts.alertsTo;
    this.#onAlert = opts.onAlert;
  }

  /** Sweeps what fell due while the adapter was down, then keeps the timer armed. */
  start(): Promise<void> {
    return this.#sweep();
  }

  /** After every commit: wake the agents that got deliveries; re-arm the timer if needed. */
  afterCommit(): void {
    const d = this.#store.deliveries;
    for (const alert of d.takeAlerts()) this.#onAlert?.(alert);
    for (const agent of d.takeTouched()) this.#wake(agent);
    if (d.takeTimingChanged()) this.#arm();
  }

  /** Waiters still parked: for the metrics. */
  get waiting(): number {
    let n = 0;
    for (const set of this.#waiters.values()) n += set.size;
    return n;
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
      const got = await this.#lease(agent, max);
      if (got.length > 0 || gone || this.#stopped) return got;
      const left = deadline - this.#now();
      if (left <= 0) return [];
      if (!(await this.#park(agent, left, closed))) return [];
    }
  }

  ack(agent: string, ids: readonly number[]) {
    return this.#commits.run(() => this.#store.deliveries.ack(agent, ids));
  }

  nack(agent: string, ids: readonly number[]) {
    return this.#commits.run(() => this.#store.deliveries.nack(agent, ids, this.#now()));
  }

  /** Stops the timer and answers every parked poll with what it has (nothing). */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    for (const set of this.#waiters.values()) for (const w of set) w.wake(false);
    this.#waiters.clear();
  }

  #lease(agent: string, max: number): Promise<DeliveryJson[]> {
    return this.#commits.run(() => this.#store.lease(agent, max, this.#now()), { late: true });
  }

  /**
   * A stored message failed its checksum on `agent`'s read: log at fatal and alert alerts_to
   * (aggregated like every alert). /health reads the store's corruption flag.
   */
  reportCorruption(agent: string, err: GatewayError): void {
    this.#logger.fatal({ agent, detail: this.#store.corruption }, `integrity: ${err.message}`);
    this.#commits
      .run(() =>
        this.#store.deliveries.alert(
          agent,
          'checksum_mismatch',
          this.#store.corruption ?? '',
          0,
          this.#now(),
        ),
      )
      .catch((e: unknown) => this.#logger.error({ err: e }, 'could not raise the integrity alert'));
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
    const due = this.#store.deliveries.nextDue(this.#now());
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
    await this.#commits.run(() => this.#store.deliveries.sweep(this.#now()));
    // Retries whose backoff ended are ready now: every parked poll looks again.
    for (const agent of [...this.#waiters.keys()]) this.#wake(agent);
    this.#arm();
  }

  get alertsTo(): string {
    return this.#alertsTo;
  }
}
