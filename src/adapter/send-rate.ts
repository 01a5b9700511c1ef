/**
 * Per-sender send rates (docs/reference/configuration.md, AGW_SEND_RATE and AGW_SEND_BURST;
 * docs/design/threads.md, "Rates"): a token bucket per sender, in this adapter's memory. Each
 * envelope that passes validation takes one token; a repeat of a stored key takes none (messages.ts
 * asks the store first). Past the bucket: 429 `rate_limited` with Retry-After, the whole seconds
 * until the next token. The buckets are per adapter: with several adapters each keeps its own, so a
 * sender spread over N of them gets up to N times its rate. That is the price of keeping shared
 * state off the hot path, and the bound still holds per adapter.
 *
 * Senders are the topology's agents (authenticated; the adapter's own alerts never pass here),
 * so the buckets are a handful of numbers each and never grow past the topology.
 */
import { GatewayError } from '../protocol/errors.js';

/** One sender's limit. */
export interface SendRate {
  /** Tokens added per second: the lasting rate, messages per second. 0: no limit. */
  readonly perSecond: number;
  /** The bucket's depth: how many may go at once after a quiet spell (a sidecar's drain). */
  readonly burst: number;
}

/**
 * AGW_SEND_RATE 100, AGW_SEND_BURST 500: far above what a model-driven agent sends (a few a
 * minute); the burst takes half of a full default outbox (1,000) at once after an outage and
 * the rest within 5 s, while one agent in a loop is held to 100 a second (8.6M a day), not the
 * 10,000 a second and more that one adapter commits (bench/RESULTS.md).
 */
export const DEFAULT_SEND_RATE: SendRate = { perSecond: 100, burst: 500 };

interface Bucket {
  /** Tokens now (fractional), as of `at`. */
  tokens: number;
  /** When `tokens` was last worked out, ms. */
  at: number;
}

export interface SendRatesOptions {
  /** The limit of every sender without its own (AGW_SEND_RATE, AGW_SEND_BURST). */
  readonly defaults: SendRate;
  /**
   * Senders' own limits (the topology's `send_rate` / `send_burst`); what one leaves out comes
   * from `defaults`.
   */
  readonly own?: ReadonlyMap<string, Partial<SendRate>>;
  /** The clock, ms. Default Date.now; tests move it. */
  readonly now?: () => number;
}

export class SendRates {
  readonly #defaults: SendRate;
  readonly #own: ReadonlyMap<string, Partial<SendRate>>;
  readonly #now: () => number;
  readonly #buckets = new Map<string, Bucket>();

  constructor(opts: SendRatesOptions) {
    this.#defaults = opts.defaults;
    this.#own = opts.own ?? new Map();
    this.#now = opts.now ?? Date.now;
  }

  /** `sender`'s limit: its own where the topology sets one, else the defaults. */
  limitOf(sender: string): SendRate {
    const own = this.#own.get(sender);
    return own === undefined ? this.#defaults : { ...this.#defaults, ...own };
  }

  /** Whether `sender` is limited at all (a rate of 0 is no limit). */
  limits(sender: string): boolean {
    return this.limitOf(sender).perSecond > 0;
  }

  /**
   * Takes one of `sender`'s tokens. Throws 429 `rate_limited` with Retry-After (whole seconds
   * until the next token, at least 1) when there is none; the bucket is then left as it was.
   */
  take(sender: string): void {
    const { perSecond, burst } = this.limitOf(sender);
    if (perSecond <= 0) return;
    const now = this.#now();
    let b = this.#buckets.get(sender);
    if (b === undefined) {
      b = { tokens: burst, at: now }; // a sender starts with a full bucket
      this.#buckets.set(sender, b);
    }
    // a clock that steps back adds nothing, and takes nothing either
    b.tokens = Math.min(burst, b.tokens + (Math.max(0, now - b.at) * perSecond) / 1000);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return;
    }
    const retryAfterS = Math.max(1, Math.ceil((1 - b.tokens) / perSecond));
    throw new GatewayError(
      'rate_limited',
      `${sender} sends faster than its rate (${perSecond} a second, ${burst} at once); retry in ${retryAfterS} s`,
      { retryAfterS },
    );
  }
}
