/**
 * The sidecar's one backoff: full jitter over an exponentially growing cap (base × 2^step,
 * capped), as AWS's "Exponential Backoff and Jitter" recommends, so that sidecars that lost the
 * adapter together do not come back together. The start gate, the drain and the breaker's
 * reset timeout all wait this long.
 */
export interface BackoffOptions {
  /** The first cap, ms. */
  readonly baseMs: number;
  /** The largest cap, ms. */
  readonly maxMs: number;
  readonly random?: () => number;
}

/** How long to wait before try `step` + 1 (step 0: the first retry), ms: 0 to the cap. */
export function backoff(step: number, o: BackoffOptions): number {
  const cap = Math.min(o.maxMs, o.baseMs * 2 ** Math.min(step, 30));
  return cap * (o.random ?? Math.random)();
}
