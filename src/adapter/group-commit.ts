/**
 * Group commit: every write that arrives in one turn of the event loop (appends, leases, acks,
 * nacks, sweeps) goes into one transaction, so one fsync covers them all. Nobody is answered
 * before that commit returns.
 *
 * The mechanism is the event loop itself. run() queues and schedules a flush with
 * setImmediate, which runs after the poll phase has handed over every request that was ready;
 * the commit then blocks the loop for its fsync, and requests arriving meanwhile wait in the
 * socket buffers to form the next group. Under load the group grows to match the fsync time;
 * alone, a request waits for nothing but its own commit.
 */
import { GatewayError, isGatewayError } from '../protocol/errors.js';

/** What the group commit needs of a store: a transaction around a function. */
export interface Transactional {
  transaction<T>(fn: () => T): T;
}

interface Op {
  readonly run: () => unknown;
  readonly weight: number;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: unknown) => void;
}

export interface CommitStats {
  /** Messages appended (a batch counts each), and operations of any kind. */
  readonly messages: number;
  readonly operations: number;
  readonly seconds: number;
}

export interface GroupCommitOptions {
  /**
   * Weight (messages) that may wait for a commit at once; beyond it a write is refused with
   * 503 `overloaded` and Retry-After. Default 10,000: about half a second of work at the
   * measured commit rate, and a bound on the memory requests can pin (10,000 × 256 KiB at
   * worst).
   */
  readonly maxPending?: number;
  /** After every commit that succeeded, before anyone is answered. */
  readonly onCommit?: (stats: CommitStats) => void;
  readonly onError?: (err: unknown) => void;
}

export class GroupCommit {
  readonly #store: Transactional;
  readonly #maxPending: number;
  readonly #onCommit: ((stats: CommitStats) => void) | undefined;
  readonly #onError: ((err: unknown) => void) | undefined;
  #early: Op[] = [];
  #late: Op[] = [];
  #pending = 0;
  #scheduled = false;

  constructor(store: Transactional, opts: GroupCommitOptions = {}) {
    this.#store = store;
    this.#maxPending = opts.maxPending ?? 10_000;
    this.#onCommit = opts.onCommit;
    this.#onError = opts.onError;
  }

  /** Weight waiting for the next commit. */
  get pending(): number {
    return this.#pending;
  }

  /**
   * Runs `op` inside the next group's transaction and resolves with its result once that has
   * committed. A GatewayError thrown by op rejects op alone (an op throws one only before it
   * writes); any other error rolls the whole group back and rejects every op in it with 503
   * `storage_error`. `late` ops run after the others of their group: the inbox leases last,
   * so that a poll sees the messages committed in the same group.
   */
  run<T>(op: () => T, opts: { weight?: number; late?: boolean } = {}): Promise<T> {
    const weight = opts.weight ?? 0;
    if (weight > 0 && this.#pending + weight > this.#maxPending) {
      return Promise.reject(
        new GatewayError(
          'overloaded',
          `${this.#pending} messages are already waiting for a commit`,
        ),
      );
    }
    return new Promise<T>((resolve, reject) => {
      (opts.late ? this.#late : this.#early).push({
        run: op,
        weight,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
      this.#pending += weight;
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Commits everything queued now. Runs by itself; shutdown calls it to finish the queue. */
  flush(): void {
    this.#scheduled = false;
    const ops = this.#late.length === 0 ? this.#early : [...this.#early, ...this.#late];
    if (ops.length === 0) return;
    this.#early = [];
    this.#late = [];
    const messages = this.#pending;
    this.#pending = 0;
    const started = process.hrtime.bigint();
    let results: ({ ok: unknown } | { err: GatewayError })[];
    try {
      results = this.#store.transaction(() =>
        ops.map((op) => {
          try {
            return { ok: op.run() };
          } catch (err) {
            if (isGatewayError(err)) return { err };
            throw err;
          }
        }),
      );
    } catch (err) {
      // The transaction rolled back: nothing of this group was written, so nobody is acked
      // and every sender may retry with the same key.
      this.#onError?.(err);
      const failure = new GatewayError(
        'storage_error',
        'the message store could not commit; retry',
        {
          cause: err,
        },
      );
      for (const op of ops) op.reject(failure);
      return;
    }
    this.#onCommit?.({
      messages,
      operations: ops.length,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    });
    ops.forEach((op, i) => {
      const r = results[i]!;
      if ('ok' in r) op.resolve(r.ok);
      else op.reject(r.err);
    });
  }
}
