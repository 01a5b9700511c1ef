/**
 * Group commit: every write that arrives in one turn of the event loop (appends, leases, acks,
 * nacks, sweeps) goes into one transaction, so one fsync covers them all. Nobody is answered
 * before that commit returns.
 *
 * The mechanism is the event loop itself. run() queues and schedules a flush with
 * setImmediate, which runs after the poll phase has handed over every request that was ready.
 * One commit runs at a time: SQLite's blocks the loop for its fsync, so requests arriving
 * meanwhile wait in the socket buffers; PostgreSQL's is awaited, and they wait in the queue.
 * Either way they form the next group, which is flushed as soon as the commit before it ends.
 * Under load the group grows to match the commit time; alone, a request waits for nothing but
 * its own commit.
 */

import { GatewayError } from '../protocol/errors.js';
import { EventMap } from '../protocol/events.js';
import type { Committed, OpResult, Store, StoreOp } from '../store/store.js';
import type { CommitEvents } from './events.js';

export type { CommitStats } from './events.js';

interface Pending {
  readonly op: StoreOp;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: unknown) => void;
  /** A lease's: true once nobody will read what it hands over (run(), `abandoned`). */
  readonly abandoned?: () => boolean;
}

export interface GroupCommitOptions {
  /**
   * Weight (messages) that may wait for a commit at once; beyond it a write is refused with
   * 503 `overloaded` and Retry-After. Default 10,000: about half a second of work at the
   * measured commit rate, and a bound on the memory requests can pin (10,000 × 256 KiB at
   * worst).
   */
  readonly maxPending?: number;
  /** Where it tells what it committed: the adapter's map (events.ts); its own otherwise. */
  readonly events?: EventMap<CommitEvents>;
}

export class GroupCommit {
  /** `commit`, `commit:error`, then each `alert` the group wrote (events.ts). */
  readonly events: EventMap<CommitEvents>;
  readonly #store: Pick<Store, 'commit'>;
  readonly #maxPending: number;
  #early: Pending[] = [];
  #late: Pending[] = [];
  #pending = 0;
  #scheduled = false;
  /** The commit running now; the next group waits for it. */
  #running: Promise<void> | undefined;

  constructor(store: Pick<Store, 'commit'>, opts: GroupCommitOptions = {}) {
    this.#store = store;
    this.#maxPending = opts.maxPending ?? 10_000;
    this.events = opts.events ?? new EventMap<CommitEvents>();
  }

  /** Subscribes to one of its events (a shorthand for `events.on`). */
  on<K extends keyof CommitEvents>(event: K, listener: (...args: CommitEvents[K]) => void): this {
    this.events.on(event, listener);
    return this;
  }

  /**
   * Called with the writes of each group just before it is taken, while run() still adds to it:
   * the delivery service leases here for the polls parked on the recipients of the group's
   * appends, so a parked poll's lease shares the commit (and fsync) of the message that wakes it
   * instead of taking a commit of its own after it.
   */
  beforeGroup: ((ops: readonly StoreOp[]) => void) | undefined;

  /**
   * Runs `op` inside the next group's transaction and resolves with its result once that has
   * committed. A GatewayError from the op rejects it alone (an op refuses only before it
   * writes); any other error rolls the whole group back and rejects every op in it with 503
   * `storage_error`. Leases run after the others of their group, so that a poll sees the
   * messages committed in the same group. An append weighs its number of messages.
   *
   * `abandoned` (a lease's only): asked as the group is taken; true, and the lease is left out
   * of it and resolves with no deliveries. A poll whose client closed its connection while its
   * lease waited for the group would otherwise lease what nobody reads, an attempt burnt each.
   */
  run<O extends StoreOp>(op: O, abandoned?: () => boolean): Promise<OpResult<O>> {
    const weight = op.op === 'append' ? op.drafts.length : 0;
    if (weight > 0 && this.#pending + weight > this.#maxPending) {
      return Promise.reject(
        new GatewayError(
          'overloaded',
          `${this.#pending} messages are already waiting for a commit`,
        ),
      );
    }
    return new Promise<OpResult<O>>((resolve, reject) => {
      const p = { op, resolve: resolve as (v: unknown) => void, reject };
      // leases and an ask's take of its reply run last in their group, after its appends: a
      // take that ran before the append of its reply in the same group would find nothing, and
      // the wake after the commit would come before it parked (a reply missed until its wait ends)
      if (op.op === 'lease' || op.op === 'take_reply')
        this.#late.push(abandoned === undefined ? p : { ...p, abandoned });
      else this.#early.push(p);
      this.#pending += weight;
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  /**
   * Commits everything queued now, after the commit running now if any; resolves when the
   * queue it found has committed. Runs by itself; shutdown calls it to finish the queue.
   */
  async flush(): Promise<void> {
    this.#scheduled = false;
    while (this.#running !== undefined) await this.#running;
    if (this.beforeGroup !== undefined && this.#early.length > 0) {
      try {
        this.beforeGroup(this.#early.map((p) => p.op));
      } catch (err) {
        // the polls it would have served are woken after the commit instead
        this.events.emit('listener:error', err, 'beforeGroup');
      }
    }
    const late = this.#late.filter((p) => {
      if (p.abandoned?.() !== true) return true;
      p.resolve([]); // OpResult<lease>: nothing handed over
      return false;
    });
    const group = late.length === 0 ? this.#early : [...this.#early, ...late];
    this.#late = [];
    if (group.length === 0) return;
    this.#early = [];
    const messages = this.#pending;
    this.#pending = 0;
    const running = this.#commit(group, messages);
    this.#running = running;
    try {
      await running;
    } finally {
      this.#running = undefined;
    }
  }

  async #commit(group: Pending[], messages: number): Promise<void> {
    const started = process.hrtime.bigint();
    let committed: Committed;
    try {
      committed = await this.#store.commit(group.map((p) => p.op));
    } catch (err) {
      // The transaction rolled back: nothing of this group was written, so nobody is acked
      // and every sender may retry with the same key.
      this.events.emit('commit:error', err);
      const failure = new GatewayError(
        'storage_error',
        'the message store could not commit; retry',
        { cause: err },
      );
      for (const p of group) p.reject(failure);
      return;
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    // Listeners are isolated (protocol/events.ts): one that throws (an effect's bug, a journald
    // write that fails) neither skips the others nor escapes flush(), where it would leave the
    // group's senders unanswered. `commit` first: its listeners wake the parked polls before
    // the alerts' CRIT entries are written.
    const { effects } = committed;
    this.events.emit('commit', { messages, operations: group.length, seconds }, effects);
    for (const alert of effects.alerts) {
      this.events.emit('alert', alert);
      if (alert.kind === 'alert/dead-letter')
        this.events.emit('delivery:dead-letter', alert.payload);
    }
    group.forEach((p, i) => {
      const r = committed.results[i]!;
      if ('ok' in r) p.resolve(r.ok);
      else p.reject(r.err);
    });
  }
}
