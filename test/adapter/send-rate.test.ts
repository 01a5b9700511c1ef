/**
 * The token bucket per sender (src/adapter/send-rate.ts), on a clock the test moves: a full
 * bucket at first, refilled at the rate up to the burst, 429 rate_limited with the whole seconds
 * until the next token (at least 1), own limits over the defaults, and a rate of 0 as no limit.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_SEND_RATE, SendRates } from '../../src/adapter/send-rate.js';
import { ADAPTER_SETTINGS } from '../../src/adapter/settings.js';
import { GatewayError } from '../../src/protocol/errors.js';

function clock(start = 1_000_000) {
  let t = start;
  return {
    now: () => t,
    move: (ms: number) => {
      t += ms;
    },
  };
}

/** The error `take` throws, or undefined when it took a token. */
function refusal(rates: SendRates, sender: string): GatewayError | undefined {
  try {
    rates.take(sender);
    return undefined;
  } catch (err) {
    if (err instanceof GatewayError) return err;
    throw err;
  }
}

/** How many tokens `sender` can take now, up to `max`. */
function drain(rates: SendRates, sender: string, max = 10_000): number {
  let n = 0;
  while (n < max && refusal(rates, sender) === undefined) n++;
  return n;
}

describe('SendRates', () => {
  it('starts full, refuses past the burst with rate_limited and Retry-After, refills at the rate up to the burst', () => {
    const c = clock();
    const rates = new SendRates({ defaults: { perSecond: 10, burst: 5 }, now: c.now });
    expect(drain(rates, 'pm')).toBe(5);
    const err = refusal(rates, 'pm');
    expect(err?.code).toBe('rate_limited');
    expect(err?.status).toBe(429);
    expect(err?.retryable).toBe(true);
    expect(err?.retryAfterS).toBe(1); // 0.1 s to the next token: whole seconds, at least 1
    c.move(100);
    expect(drain(rates, 'pm')).toBe(1);
    c.move(250);
    expect(drain(rates, 'pm')).toBe(2); // 2.5 tokens: two whole ones, half is kept
    c.move(50);
    expect(drain(rates, 'pm')).toBe(1);
    c.move(60_000);
    expect(drain(rates, 'pm')).toBe(5); // never more than the burst
  });

  it('says how many whole seconds until the next token when the rate is slow', () => {
    const c = clock();
    const rates = new SendRates({ defaults: { perSecond: 1, burst: 1 }, now: c.now });
    expect(drain(rates, 'pm')).toBe(1);
    expect(refusal(rates, 'pm')?.retryAfterS).toBe(1);
    c.move(400);
    expect(refusal(rates, 'pm')?.retryAfterS).toBe(1); // 0.6 s left
    c.move(600);
    expect(refusal(rates, 'pm')).toBeUndefined();
  });

  it('keeps a bucket per sender', () => {
    const c = clock();
    const rates = new SendRates({ defaults: { perSecond: 1, burst: 3 }, now: c.now });
    expect(drain(rates, 'pm')).toBe(3);
    expect(drain(rates, 'qa')).toBe(3);
    expect(refusal(rates, 'pm')?.code).toBe('rate_limited');
  });

  it("gives an agent's own limit over the defaults, fills what it leaves out from them, and a rate of 0 is no limit", () => {
    const c = clock();
    const rates = new SendRates({
      defaults: { perSecond: 1, burst: 2 },
      own: new Map([
        ['loud', { perSecond: 1, burst: 50 }],
        ['deep', { burst: 7 }],
        ['free', { perSecond: 0 }],
      ]),
      now: c.now,
    });
    expect(drain(rates, 'pm')).toBe(2);
    expect(drain(rates, 'loud')).toBe(50);
    expect(rates.limitOf('deep')).toEqual({ perSecond: 1, burst: 7 });
    expect(drain(rates, 'deep')).toBe(7);
    expect(rates.limits('free')).toBe(false);
    expect(drain(rates, 'free', 5000)).toBe(5000);
  });

  it('with a rate of 0 (AGW_SEND_RATE=0) limits nobody', () => {
    const c = clock();
    const rates = new SendRates({ defaults: { perSecond: 0, burst: 1 }, now: c.now });
    expect(rates.limits('pm')).toBe(false);
    expect(drain(rates, 'pm', 5000)).toBe(5000);
  });

  it('adds nothing when the clock steps back', () => {
    const c = clock();
    const rates = new SendRates({ defaults: { perSecond: 10, burst: 2 }, now: c.now });
    expect(drain(rates, 'pm')).toBe(2);
    c.move(-5000);
    expect(refusal(rates, 'pm')?.code).toBe('rate_limited');
    c.move(100); // 100 ms after the step back: one token
    expect(drain(rates, 'pm')).toBe(1);
  });

  it('defaults to 100 a second with a burst of 500', () => {
    expect(DEFAULT_SEND_RATE).toEqual({ perSecond: 100, burst: 500 });
    expect(ADAPTER_SETTINGS.sendRate).toEqual({ env: 'AGW_SEND_RATE', default: '100' });
    expect(ADAPTER_SETTINGS.sendBurst).toEqual({ env: 'AGW_SEND_BURST', default: '500' });
    expect(ADAPTER_SETTINGS.criticalCapacity).toEqual({
      env: 'AGW_CRITICAL_CAPACITY',
      default: '5000',
    });
  });
});
