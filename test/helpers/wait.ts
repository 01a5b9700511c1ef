/**
 * Waiting in tests: for an event, never for a guessed time. `until` polls a condition; its
 * deadline only bounds a failing test (it is generous so that a busy machine does not fail a
 * passing one). `untilParked` waits until an adapter holds an agent's long polls parked, read
 * from its /metrics, for the tests that must know a poll waits before they send.
 */
import { call } from './http.js';

export interface UntilOptions {
  /** Gives up after this long, ms; default 60 s. */
  readonly ms?: number;
  /** Looks again after this long, ms; default 20. */
  readonly everyMs?: number;
}

/** Resolves once `check` holds; throws naming `what` after `ms`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  what: string | (() => string),
  { ms = 60_000, everyMs = 20 }: UntilOptions = {},
): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline)
      throw new Error(`not within ${ms} ms: ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The adapter's count of `agent`'s long polls parked at it now (agw_agent_parked_polls). */
export async function parkedPolls(adapterUrl: string, agent: string): Promise<number> {
  const text = (await call(adapterUrl, 'GET', '/metrics')).body as string;
  const m = new RegExp(`^agw_agent_parked_polls\\{agent="${agent}"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]);
}

/** Resolves once `agent` has at least `n` long polls parked at the adapter. */
export function untilParked(adapterUrl: string, agent: string, n = 1): Promise<void> {
  return until(
    async () => (await parkedPolls(adapterUrl, agent)) >= n,
    `${n} poll(s) of ${agent} parked at ${adapterUrl}`,
  );
}
