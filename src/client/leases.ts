/**
 * The receive loop's lease keeper: while the loop holds deliveries it has not settled yet (the
 * one whose handler runs, and those of the same poll waiting their turn), it extends their
 * leases (POST /v1/leases) whenever half of a lease is left, until each is released. A failed
 * extension never throws: it is reported, retried while it may succeed, and dropped when the
 * delivery is no longer leased (at worst the message comes again, as at-least-once allows).
 *
 * Times are the agent's clock: the first due time comes from the delivery's `lease_expires_at`
 * (a clock ahead of the adapter's only makes it extend early); after an extension the lease is
 * taken to end `extendMs` after the request was sent, which no clock skew can make too late.
 */
import type { Lease } from '../protocol/agent-api.js';
import { isRetryableAnswer } from '../protocol/errors.js';
import { DEFAULT_MAX_LEASE_MS } from '../protocol/limits.js';

export type { Lease } from '../protocol/agent-api.js';

export interface LeaseKeeperOptions {
  /** POST /v1/leases; rejects with an error carrying `status` and `code` for a refusal. */
  readonly extend: (ids: number[], extendMs: number) => Promise<{ leases: Lease[] }>;
  /** Each extension's length, ms; undefined: the lease the adapter gave, bounded. */
  readonly extendMs: number | undefined;
  /** A failed extension (already handled): for logs. */
  readonly onError: (err: unknown, deliveryIds: number[]) => void;
}

/** The default extension when the lease the adapter gave cannot be told (clock skew), ms. */
const FALLBACK_EXTEND_MS = 30_000;
/** The shortest default extension, ms. */
const MIN_EXTEND_MS = 1_000;
/** After a failed extension that may succeed later: the first wait and the longest, ms. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 30_000;

/** Refusals of a whole request that may concern only some of its ids. */
const SPLIT_ON: ReadonlySet<number> = new Set([400, 403, 409]);

interface Held {
  /** When the lease ends, on the agent's clock (ms). */
  expiresAt: number;
  /** How long the lease was when it was last given (ms): extend when half of it is left. */
  spanMs: number;
}

/** The extension to ask for by default: the lease the adapter gave, from 1 s to 15 min. */
export function defaultExtendMs(spanMs: number): number {
  if (!Number.isFinite(spanMs) || spanMs <= 0) return FALLBACK_EXTEND_MS;
  return Math.min(DEFAULT_MAX_LEASE_MS, Math.max(MIN_EXTEND_MS, Math.round(spanMs)));
}

export class LeaseKeeper {
  readonly #o: LeaseKeeperOptions;
  readonly #held = new Map<number, Held>();
  readonly #extendMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #failures = 0;

  /** Starts keeping the leases of `deliveries`, received (the inbox answered) at `receivedAt`. */
  constructor(
    deliveries: readonly { delivery_id: number; lease_expires_at: string }[],
    receivedAt: number,
    o: LeaseKeeperOptions,
  ) {
    this.#o = o;
    let first: number | undefined;
    for (const d of deliveries) {
      const expiresAt = Date.parse(d.lease_expires_at);
      const spanMs = expiresAt - receivedAt;
      // an unreadable or past expiry (clock skew): extend at once
      this.#held.set(
        d.delivery_id,
        Number.isFinite(spanMs) ? { expiresAt, spanMs } : { expiresAt: receivedAt, spanMs: 0 },
      );
      first ??= spanMs;
    }
    this.#extendMs = o.extendMs ?? defaultExtendMs(first ?? Number.NaN);
    this.#arm();
  }

  /** Done with this one (its handler settled): its lease is no longer extended. */
  release(id: number): void {
    this.#held.delete(id);
    if (this.#held.size === 0) this.#clear();
  }

  /** Stops: nothing is extended any more. */
  close(): void {
    this.#closed = true;
    this.#held.clear();
    this.#clear();
  }

  #clear(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Next tick when half of the first-ending lease is left (or the retry wait after a failure). */
  #arm(notBefore = 0): void {
    this.#clear();
    if (this.#closed || this.#held.size === 0) return;
    let due = Number.POSITIVE_INFINITY;
    for (const h of this.#held.values()) due = Math.min(due, h.expiresAt - h.spanMs / 2);
    const delay = Math.max(due - Date.now(), notBefore, 0);
    this.#timer = setTimeout(() => void this.#tick(), delay);
    this.#timer.unref?.();
  }

  async #tick(): Promise<void> {
    this.#timer = undefined;
    const ids = [...this.#held.keys()];
    if (ids.length === 0) return;
    const retryAfter = await this.#extend(ids);
    this.#arm(retryAfter);
  }

  /**
   * One extension of `ids`; refused for several (400, 403, 409), each again alone. Returns the
   * wait before the next try after a failure worth retrying (else 0).
   */
  async #extend(ids: number[]): Promise<number> {
    const sentAt = Date.now();
    try {
      await this.#o.extend(ids, this.#extendMs);
      this.#failures = 0;
      for (const id of ids) {
        const h = this.#held.get(id);
        if (h !== undefined) {
          h.expiresAt = sentAt + this.#extendMs;
          h.spanMs = this.#extendMs;
        }
      }
      return 0;
    } catch (err) {
      const still = ids.filter((id) => this.#held.has(id));
      if (this.#closed || still.length === 0) return 0; // settled meanwhile: nothing to report
      const { status, code } = err as { status?: unknown; code?: unknown };
      if (typeof status !== 'number') return this.#retryLater(err, still); // no answer
      if (still.length > 1 && SPLIT_ON.has(status)) {
        // refused whole for one of them (not leased any more, another's id, a sidecar's own
        // id it cannot mix): each alone, so that the others keep theirs
        let wait = 0;
        for (const id of still) wait = Math.max(wait, await this.#extend([id]));
        return wait;
      }
      if (isRetryableAnswer(status, code)) return this.#retryLater(err, still);
      // not leased any more, or refused for good (an old sidecar without the endpoint, an
      // extension longer than AGW_MAX_LEASE_MS): stop extending these
      for (const id of still) this.#held.delete(id);
      this.#report(err, still);
      return 0;
    }
  }

  #retryLater(err: unknown, ids: number[]): number {
    this.#report(err, ids);
    const wait = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(this.#failures, 20));
    this.#failures++;
    return wait;
  }

  #report(err: unknown, ids: number[]): void {
    try {
      this.#o.onError(err, ids);
    } catch {
      // a throwing logger must not end the keeper (it runs from a timer)
    }
  }
}
