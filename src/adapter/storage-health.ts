/**
 * Storage health: a store whose writes keep failing on the storage itself (a full disk after
 * all, I/O errors, a broken file: the store throws StorageFailure) turns /health to 503, so the
 * only replica leaves the Service and the sidecars keep their messages in their outboxes
 * instead of collecting 503s. A refusal by a storage bound (`storage_full`) is not such a
 * failure: it is the bound working, and /health stays as it is.
 *
 * - Failing: FAILURES_TO_TRIP commits in a row failed on the storage, with no commit holding
 *   messages between them (one failure is a retryable 503, not an outage). A CRIT journald
 *   entry (`storage`) says so at once: journald needs no disk of ours.
 * - The alert to alerts_to (`alert/storage`, reason `write_failures`, the count of failed
 *   commits) is a stored message, so it cannot be written while writes fail: it is the probe.
 *   While failing, it is tried every probeMs; the first that commits (or the first commit of
 *   messages) ends the failing state, and the alert goes out then, saying how many failed.
 */
import type { Logger } from 'pino';
import { ADAPTER_SENDER } from '../protocol/envelope.js';
import { StorageFailure } from '../store/store.js';
import type { AdapterEventMap } from './events.js';
import type { CommitStats, GroupCommit } from './group-commit.js';

/** Three failed commits in a row: past one retried 503, short of a sender's patience. */
const FAILURES_TO_TRIP = 3;

export interface StorageWatchOptions {
  readonly commits: GroupCommit;
  readonly logger: Logger;
  readonly now: () => number;
  /** Where failing and recovering are told (their log lines and CRIT entry: events.ts). */
  readonly events?: AdapterEventMap | undefined;
  /**
   * While failing, how often the probe write (the alert) is tried, ms. Default 5,000: the
   * readiness probe's period, so the Service gets the adapter back within one more.
   */
  readonly probeMs?: number | undefined;
}

export class StorageWatch {
  readonly #o: StorageWatchOptions;
  readonly #probeMs: number;
  /** Commits failed on the storage since the last commit of messages. */
  #inARow = 0;
  /** Commits failed on the storage that no alert has counted yet. */
  #uncounted = 0;
  #failing: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(opts: StorageWatchOptions) {
    this.#o = opts;
    this.#probeMs = opts.probeMs ?? 5000;
    opts.commits.on('commit:error', (err) => this.#failed(err));
    opts.commits.on('commit', (stats) => this.#committed(stats));
  }

  /** Why writes are failing, while they are (/health answers 503 with it); else undefined. */
  get failing(): string | undefined {
    return this.#failing;
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  #failed(err: unknown): void {
    if (!(err instanceof StorageFailure)) return;
    this.#inARow++;
    this.#uncounted++;
    if (this.#inARow < FAILURES_TO_TRIP) return;
    const first = this.#failing === undefined;
    this.#failing = `${this.#inARow} commits in a row failed on the storage (last: ${err.message})`;
    if (!first) return;
    this.#o.events?.emit('storage:failing', { why: this.#failing, count: this.#inARow, err });
    this.#schedule();
  }

  #committed(stats: CommitStats): void {
    if (stats.messages === 0) return; // leases, acks, sweeps: they say little about the disk
    this.#inARow = 0;
    if (this.#failing !== undefined) this.#recovered('a commit of messages');
    else this.#uncounted = 0; // a failure or two, then writes went on: retried 503s, no outage
  }

  /** While failing: the alert, tried every probeMs; its commit ends the failing state. */
  #schedule(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#failing === undefined) return;
      this.#alert().then(
        (wrote) => (wrote ? this.#recovered('the alert') : this.#schedule()),
        () => this.#schedule(),
      );
    }, this.#probeMs);
    this.#timer.unref();
  }

  #recovered(what: string): void {
    if (this.#failing === undefined) return;
    this.#failing = undefined;
    this.#o.events?.emit('storage:recovered', what);
    this.#inARow = 0;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#uncounted > 0) void this.#alert();
  }

  /** Raises alert/storage for the failed commits not yet counted; resolves whether it committed. */
  async #alert(): Promise<boolean> {
    const count = this.#uncounted;
    if (count === 0) return true;
    try {
      await this.#o.commits.run({
        op: 'alert',
        recipient: ADAPTER_SENDER,
        reason: 'write_failures',
        count,
        now: this.#o.now(),
      });
      this.#uncounted -= count;
      return true;
    } catch {
      return false;
    }
  }
}
