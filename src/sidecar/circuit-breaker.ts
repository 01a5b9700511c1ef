/**
 * The circuit breaker around every adapter call (sends, the drain, polls, acks, replays): opossum, with a reset timeout that grows
 * exponentially with full jitter while half-open probes fail (base × 2^n, capped, times a
 * uniform 0..1), back to the base on close. opossum 9 has no reset backoff of its own: we own
 * the options object it reads, and change its resetTimeout from a listener that runs before
 * opossum's own 'open' handler arms the timer (prependListener).
 *
 * The state and the backoff step are stored (docs/reference/sidecar.md, "The breaker and the
 * drain": breaker state is stored state, not memory), so a restarted sidecar resumes an open
 * breaker instead of hammering a down adapter.
 */
import CircuitBreaker from 'opossum';
import type { EventMap, ListenerErrors } from '../protocol/events.js';
import { type AdapterClient, CallAborted, RetryableAnswer } from './adapter-client.js';
import { backoff } from './backoff.js';

/** What a caller needs of the adapter connection: one call. */
export type Upstream = Pick<AdapterClient, 'request'>;

export type BreakerStateName = 'closed' | 'open' | 'half_open';

export interface StoredBreaker {
  readonly state: BreakerStateName;
  /** Consecutive opens since the last close. */
  readonly step: number;
  /** When it last opened, ms since the epoch. */
  readonly openedAt: number | null;
  /** The reset timeout that open chose, ms. */
  readonly resetMs: number;
}

/** What the breaker tells (a part of the sidecar's map, events.ts). */
export interface BreakerEvents {
  /** The circuit to the adapter changed state (open, half-open, closed); the state is saved. */
  breaker: [state: StoredBreaker];
}

export interface BreakerOptions {
  /** First reset timeout, ms. Default 1,000. */
  readonly baseMs?: number;
  /** Cap of the reset timeout, ms. Default 60,000. */
  readonly maxMs?: number;
  /** Calls in the rolling window before the breaker may open. Default 5. */
  readonly volumeThreshold?: number;
  /** Failed share of calls that opens it. Default 50. */
  readonly errorThresholdPercentage?: number;
  /**
   * Deadline of one call, ms, or false for none. Default false: every call through it carries
   * its own deadline (the adapter connection's: 10 s, a long poll's wait + 10 s), which a single
   * breaker-wide timeout would cut short.
   */
  readonly timeoutMs?: number | false;
  readonly random?: () => number;
  readonly load?: () => StoredBreaker | undefined;
  readonly save?: (s: StoredBreaker) => void;
  /** Where the breaker tells each change of state, after saving it ('breaker'). */
  readonly events?: Pick<EventMap<BreakerEvents & ListenerErrors>, 'emit'>;
}

export class AdapterBreaker {
  readonly #breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  readonly #options: CircuitBreaker.Options;
  readonly #baseMs: number;
  readonly #maxMs: number;
  readonly #random: () => number;
  readonly #save: ((s: StoredBreaker) => void) | undefined;
  readonly #events: BreakerOptions['events'];
  #step: number;
  #openedAt: number | null;

  constructor(opts: BreakerOptions = {}) {
    this.#baseMs = opts.baseMs ?? 1000;
    this.#maxMs = opts.maxMs ?? 60_000;
    this.#random = opts.random ?? Math.random;
    this.#save = opts.save;
    this.#events = opts.events;
    const stored = opts.load?.();
    this.#step = stored?.step ?? 0;
    this.#openedAt = stored?.openedAt ?? null;
    // Ours, not a caller's: opossum writes its defaults into it.
    this.#options = <CircuitBreaker.Options>{
      timeout: opts.timeoutMs ?? false,
      // a 429 says "slower", not "down": it never counts against the circuit; nor does a call
      // its caller gave up (an agent's abandoned poll), which says nothing of the adapter.
      // (opossum counts a filtered error as a success: one that was a half-open probe closes the
      // circuit, and the next calls that fail open it again. It has no third outcome, and
      // staying half-open would take no probe more.)
      errorFilter: (err: unknown) =>
        err instanceof CallAborted ||
        (err instanceof RetryableAnswer && err.response.status === 429),
      resetTimeout: stored?.state === 'open' ? stored.resetMs : this.#baseMs,
      volumeThreshold: opts.volumeThreshold ?? 5,
      errorThresholdPercentage: opts.errorThresholdPercentage ?? 50,
      // Nothing reads opossum's latency percentiles or its 'snapshot' events; left on, every
      // call's latency is kept for the 10 s window, and each second a snapshot concatenates
      // and sorts them all (~1% of the sidecar's CPU per message at 1,000 msg/s).
      // The open decision reads only the counts (fires, failures), which stay.
      rollingPercentilesEnabled: false,
      enableSnapshots: false,
      ...(stored !== undefined && stored.state !== 'closed'
        ? {
            state: {
              closed: false,
              halfOpen: stored.state === 'half_open',
              lastTimerAt: stored.openedAt ?? Date.now(),
            },
          }
        : {}),
    };
    this.#breaker = new CircuitBreaker((fn: () => Promise<unknown>) => fn(), this.#options);
    this.#breaker.prependListener('open', () => {
      // full jitter over an exponentially growing cap: 1 s, 2 s, 4 s ... 60 s
      const wait = backoff(this.#step, {
        baseMs: this.#baseMs,
        maxMs: this.#maxMs,
        random: this.#random,
      });
      this.#options.resetTimeout = Math.max(1, Math.round(wait));
      this.#step++;
      this.#openedAt = Date.now();
      this.#changed();
    });
    this.#breaker.on('halfOpen', () => this.#changed());
    this.#breaker.on('close', () => {
      this.#step = 0;
      this.#openedAt = null;
      this.#options.resetTimeout = this.#baseMs;
      this.#changed();
    });
  }

  /** Runs fn through the breaker; rejects with an 'EOPENBREAKER' error while open. */
  fire<T>(fn: () => Promise<T>): Promise<T> {
    return this.#breaker.fire(fn) as Promise<T>;
  }

  get state(): BreakerStateName {
    return this.#breaker.opened ? 'open' : this.#breaker.halfOpen ? 'half_open' : 'closed';
  }

  get snapshot(): StoredBreaker {
    return {
      state: this.state,
      step: this.#step,
      openedAt: this.#openedAt,
      resetMs: Number(this.#options.resetTimeout),
    };
  }

  /**
   * The connection with every call through this breaker: a retryable answer counts against
   * the circuit and is still answered; no answer, or an open circuit, rejects.
   */
  guard(client: Upstream): Upstream {
    return {
      request: (method, path, body, timeoutMs, signal, trace) =>
        this.fire(async () => {
          const r = await client.request(method, path, body, timeoutMs, signal, trace);
          if (r.retryable) throw new RetryableAnswer(r);
          return r;
        }).catch((err: unknown) => {
          if (err instanceof RetryableAnswer) return err.response;
          throw err;
        }),
    };
  }

  /** Closes it now: a /health answer showed the adapter is back. */
  close(): void {
    if (this.state !== 'closed') this.#breaker.close();
  }

  shutdown(): void {
    this.#breaker.shutdown();
  }

  #changed(): void {
    const s = this.snapshot;
    this.#save?.(s);
    this.#events?.emit('breaker', s);
  }
}
