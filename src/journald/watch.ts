/**
 * The orchestrator's side of the emergency channel: follow journald for the gateway's CRIT entries
 * (journalctl -f, matching MESSAGE_ID) and hand each one on, as one JSON object with its time,
 * message, priority, AGW_ fields and the fields the emergency's caller added; optionally POST it
 * to a URL, in order, with retries, from a bounded queue (`forwardQueue`, 1,000 by default: past
 * it the oldest waiting entry is dropped, counted, and reported in one line per burst and at
 * exit).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { EMERGENCY_MESSAGE_ID } from './emergency.js';

export interface WatchOptions {
  /** A journald namespace (journalctl --namespace). */
  readonly namespace?: string | undefined;
  /** journalctl --since; without it only entries written after the watch starts. */
  readonly since?: string | undefined;
  /**
   * POST each entry here as JSON, in order, retried with backoff (5 attempts of at most 5 s
   * each, 0.5 s doubling between them); a 4xx other than 429 is not retried.
   */
  readonly forward?: string | undefined;
  /**
   * Entries waiting to be POSTed (besides the one being sent). Past it the oldest waiting entry
   * is dropped, counted and reported: a target that is down or hangs costs bounded memory, and
   * when it is back it gets the latest state first. Default 1,000.
   */
  readonly forwardQueue?: number;
  /**
   * Once journalctl has stopped, how long forwarding may go on with what waits, ms; then the
   * request in flight is cut off and what is left is given up, counted and reported.
   * Default 10,000.
   */
  readonly forwardDrainMs?: number;
  /**
   * Drops are reported at most once per this many ms, one line for all the drops since the last
   * (one line per burst). Default 1,000.
   */
  readonly dropReportMs?: number;
  readonly onEntry: (entry: Record<string, unknown>) => void;
  /** Problems and reports, one line each without a newline (the CLI writes them to stderr). */
  readonly onError: (message: string) => void;
  /** journalctl's path. Default journalctl on PATH. */
  readonly journalctl?: string;
}

export interface ForwardStats {
  /** Entries the target took (2xx). */
  forwarded: number;
  /** Entries given up on: refused (4xx but 429) or failed 5 times. */
  failed: number;
  /** Entries dropped from the full queue (the oldest waiting), in all. */
  dropped: number;
  /** Entries still waiting or in flight when forwarding was given up at exit. */
  abandoned: number;
  /** Entries waiting now (besides the one in flight). */
  queued: number;
}

export const WATCH_DEFAULTS = {
  forwardQueue: 1000,
  forwardDrainMs: 10_000,
  dropReportMs: 1000,
} as const;

export interface Watch {
  readonly child: ChildProcess;
  /** Resolves with journalctl's exit code once it has stopped and forwarding has finished. */
  readonly done: Promise<number>;
  /** With `forward`: what happened to the entries to forward so far. */
  readonly forwarding: Readonly<ForwardStats> | undefined;
  stop(): void;
}

/** journalctl -o json prints a value that is not valid text as an array of byte values. */
function text(v: unknown): unknown {
  if (Array.isArray(v) && v.every((b) => typeof b === 'number'))
    return Buffer.from(v as number[]).toString('utf8');
  return v;
}

/** Fields toEntry gives under names of its own (message, priority, message_id, identifier). */
const RENAMED: ReadonlySet<string> = new Set([
  'MESSAGE',
  'PRIORITY',
  'MESSAGE_ID',
  'SYSLOG_IDENTIFIER',
]);

/**
 * One entry as watch hands it on: its time, message, priority, ids and host, then every field the
 * writer set: the gateway's AGW_* and the emergency's caller's own (TICKET=... of `emergency
 * --field`, POST /v1/emergency's `fields`), under their journald names. journald's own fields
 * (`_PID`, `__CURSOR`, ...: a leading underscore, which no writer may use) are left out.
 */
export function toEntry(raw: Record<string, unknown>): Record<string, unknown> {
  const us = Number(raw.__REALTIME_TIMESTAMP);
  const entry: Record<string, unknown> = {
    time: Number.isFinite(us) ? new Date(us / 1000).toISOString() : undefined,
    message: text(raw.MESSAGE),
    priority: Number(raw.PRIORITY),
    message_id: raw.MESSAGE_ID,
    identifier: raw.SYSLOG_IDENTIFIER,
    hostname: raw._HOSTNAME,
    pid: raw._PID === undefined ? undefined : Number(raw._PID),
  };
  for (const [k, v] of Object.entries(raw))
    if (!k.startsWith('_') && !RENAMED.has(k)) entry[k] = text(v);
  return entry;
}

export function watch(opts: WatchOptions): Watch {
  const args = ['-f', '-o', 'json', '--all', '-p', 'crit', `MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`];
  if (opts.namespace !== undefined) args.push(`--namespace=${opts.namespace}`);
  if (opts.since !== undefined) args.push(`--since=${opts.since}`);
  else args.push('--lines=0');
  const forwarder =
    opts.forward === undefined
      ? undefined
      : new Forwarder(opts.forward, {
          max: opts.forwardQueue ?? WATCH_DEFAULTS.forwardQueue,
          reportMs: opts.dropReportMs ?? WATCH_DEFAULTS.dropReportMs,
          onError: opts.onError,
        });
  const child = spawn(opts.journalctl ?? 'journalctl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const entry = toEntry(raw);
    opts.onEntry(entry);
    forwarder?.push(entry);
  });
  createInterface({ input: child.stderr! }).on('line', (line) =>
    opts.onError(`journalctl: ${line}`),
  );
  const done = new Promise<number>((resolve) => {
    child.once('error', (err) => {
      opts.onError(`cannot run journalctl: ${err.message}`);
      resolve(127);
    });
    // 'close': its output has been read to the end, every line handed on
    child.once('close', (code, signal) => resolve(code ?? (signal === 'SIGTERM' ? 0 : 1)));
  }).then(async (code) => {
    await forwarder?.finish(opts.forwardDrainMs ?? WATCH_DEFAULTS.forwardDrainMs);
    return code;
  });
  return { child, done, forwarding: forwarder?.stats, stop: () => child.kill('SIGTERM') };
}

type Outcome = 'ok' | 'failed' | 'aborted';

/**
 * Entries to POST, one at a time in order, from a queue of at most `max` waiting; past it the
 * oldest waiting one is dropped (the one in flight is never cut off for a newer one).
 */
class Forwarder {
  readonly stats: ForwardStats = { forwarded: 0, failed: 0, dropped: 0, abandoned: 0, queued: 0 };
  readonly #url: string;
  readonly #o: { max: number; reportMs: number; onError: (m: string) => void };
  readonly #queue: Record<string, unknown>[] = [];
  readonly #abort = new AbortController();
  #sending: Promise<void> | undefined;
  /** Drops since the last report line, and the timer that will write it. */
  #burst = 0;
  #reportTimer: NodeJS.Timeout | undefined;

  constructor(url: string, o: { max: number; reportMs: number; onError: (m: string) => void }) {
    if (!Number.isInteger(o.max) || o.max < 1)
      throw new RangeError(`forwardQueue must be a positive integer, not ${o.max}`);
    this.#url = url;
    this.#o = o;
  }

  push(entry: Record<string, unknown>): void {
    if (this.#abort.signal.aborted) {
      this.stats.abandoned++;
      return;
    }
    if (this.#queue.length >= this.#o.max) {
      this.#queue.shift();
      this.stats.dropped++;
      this.#burst++;
      this.#reportTimer ??= setTimeout(() => this.#report(), this.#o.reportMs);
    }
    this.#queue.push(entry);
    this.stats.queued = this.#queue.length;
    this.#sending ??= this.#send().finally(() => {
      this.#sending = undefined;
    });
  }

  async #send(): Promise<void> {
    for (let entry = this.#queue.shift(); entry !== undefined; entry = this.#queue.shift()) {
      this.stats.queued = this.#queue.length;
      const outcome = await post(this.#url, entry, this.#o.onError, this.#abort.signal);
      if (outcome === 'ok') this.stats.forwarded++;
      else if (outcome === 'failed') this.stats.failed++;
      else {
        this.stats.abandoned++;
        return;
      }
    }
  }

  #report(): void {
    if (this.#reportTimer !== undefined) clearTimeout(this.#reportTimer);
    this.#reportTimer = undefined;
    if (this.#burst === 0) return;
    const n = this.#burst;
    this.#burst = 0;
    this.#o.onError(
      `forward queue full (${this.#o.max} waiting): dropped the ${n} oldest waiting entries (${this.stats.dropped} in all); they were printed but not forwarded`,
    );
  }

  /** Lets what waits go out for up to `drainMs`, then gives the rest up; reports what was lost. */
  async finish(drainMs: number): Promise<void> {
    if (this.#sending !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        this.#sending.then(() => false),
        new Promise<boolean>((r) => {
          timer = setTimeout(() => r(true), drainMs);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        const waiting = this.#queue.splice(0).length;
        this.stats.abandoned += waiting;
        this.stats.queued = 0;
        this.#abort.abort();
        await this.#sending; // the entry in flight is counted as abandoned there
      }
    }
    this.#abort.abort(); // later pushes (none expected) are counted, not sent
    this.#report();
    const s = this.stats;
    if (s.dropped + s.failed + s.abandoned > 0) {
      this.#o.onError(
        `forward to ${this.#url} at exit: ${s.forwarded} forwarded, ${s.dropped} dropped from the full queue (bound ${this.#o.max}), ${s.failed} failed, ${s.abandoned} still waiting and not forwarded`,
      );
    }
  }
}

async function post(
  url: string,
  entry: Record<string, unknown>,
  onError: (m: string) => void,
  stop: AbortSignal,
): Promise<Outcome> {
  let delay = 500;
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(entry),
        signal: AbortSignal.any([AbortSignal.timeout(5000), stop]),
      });
      await res.arrayBuffer();
      if (res.ok) return 'ok';
      if (res.status < 500 && res.status !== 429) {
        onError(`forward to ${url} refused with ${res.status}; not retried`);
        return 'failed';
      }
    } catch {
      // network error or timeout: retried
    }
    if (stop.aborted) return 'aborted';
    if (attempt < 5) {
      try {
        await sleep(delay, undefined, { signal: stop });
      } catch {
        return 'aborted';
      }
    }
    delay *= 2;
  }
  onError(`forward to ${url} failed 5 times; the entry is printed above and was not forwarded`);
  return 'failed';
}
