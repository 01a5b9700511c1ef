/**
 * Group commit: every append that arrives in one turn of the event loop goes into one
 * transaction, so one fsync covers them all. Nobody is answered before that commit returns.
 *
 * The mechanism is the event loop itself. submit() queues and schedules a flush with
 * setImmediate, which runs after the poll phase has handed over every request that was ready;
 * the commit then blocks the loop for its fsync, and requests arriving meanwhile wait in the
 * socket buffers to form the next group. Under load the group grows to match the fsync time;
 * alone, a request waits for nothing but its own commit.
 */
import { GatewayError } from '../protocol/errors.js';
import type { AppendOutcome, MessageDraft, Store } from '../store/store.js';

interface Waiter {
  readonly drafts: readonly MessageDraft[];
  readonly resolve: (outcomes: AppendOutcome[]) => void;
  readonly reject: (err: GatewayError) => void;
}

export interface CommitStats {
  readonly messages: number;
  readonly requests: number;
  readonly seconds: number;
}

export interface GroupCommitOptions {
  /**
   * Drafts that may wait for a commit at once; beyond it a request is refused with 503
   * `overloaded` and Retry-After. Default 10,000: about half a second of work at the measured
   * commit rate, and a bound on the memory requests can pin (10,000 × 256 KiB at worst).
   */
  readonly maxPending?: number;
  readonly onCommit?: (stats: CommitStats) => void;
  readonly onError?: (err: unknown) => void;
}

export class GroupCommit {
  readonly #store: Store;
  readonly #maxPending: number;
  readonly #onCommit: ((stats: CommitStats) => void) | undefined;
  readonly #onError: ((err: unknown) => void) | undefined;
  #waiting: Waiter[] = [];
  #pending = 0;
  #scheduled = false;

  constructor(store: Store, opts: GroupCommitOptions = {}) {
    this.#store = store;
    this.#maxPending = opts.maxPending ?? 10_000;
    this.#onCommit = opts.onCommit;
    this.#onError = opts.onError;
  }

  /** Drafts waiting for the next commit. */
  get pending(): number {
    return this.#pending;
  }

  /** Resolves with one outcome per draft once the transaction holding them has committed. */
  submit(drafts: readonly MessageDraft[]): Promise<AppendOutcome[]> {
    if (this.#pending + drafts.length > this.#maxPending) {
      return Promise.reject(
        new GatewayError(
          'overloaded',
          `${this.#pending} messages are already waiting for a commit`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      this.#waiting.push({ drafts, resolve, reject });
      this.#pending += drafts.length;
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Commits everything queued now. Runs by itself; shutdown calls it to finish what is queued. */
  flush(): void {
    this.#scheduled = false;
    const group = this.#waiting;
    if (group.length === 0) return;
    this.#waiting = [];
    this.#pending = 0;
    const drafts = group.length === 1 ? group[0]!.drafts : group.flatMap((w) => w.drafts);
    const started = process.hrtime.bigint();
    let outcomes: AppendOutcome[];
    try {
      outcomes = this.#store.append(drafts);
    } catch (err) {
      // The transaction rolled back: nothing of this group was written, so nobody is acked and
      // every sender may retry with the same key.
      this.#onError?.(err);
      const failure = new GatewayError(
        'storage_error',
        'the message store could not commit; retry',
        {
          cause: err,
        },
      );
      for (const w of group) w.reject(failure);
      return;
    }
    this.#onCommit?.({
      messages: drafts.length,
      requests: group.length,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    });
    let at = 0;
    for (const w of group) {
      w.resolve(outcomes.slice(at, at + w.drafts.length));
      at += w.drafts.length;
    }
  }
}
