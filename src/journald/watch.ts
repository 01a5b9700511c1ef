/**
 * The orchestrator's side of the emergency channel: follow journald for the gateway's CRIT
 * entries (journalctl -f, matching MESSAGE_ID) and hand each one on, as one JSON object with its
 * time, message, priority and AGW_ fields; optionally POST it to a URL, in order, with retries.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EMERGENCY_MESSAGE_ID } from './emergency.js';

export interface WatchOptions {
  /** A journald namespace (journalctl --namespace). */
  readonly namespace?: string | undefined;
  /** journalctl --since; without it only entries written after the watch starts. */
  readonly since?: string | undefined;
  /** POST each entry here as JSON, retried with backoff (5 attempts, 0.5 s doubling). */
  readonly forward?: string | undefined;
  readonly onEntry: (entry: Record<string, unknown>) => void;
  readonly onError: (message: string) => void;
  /** journalctl's path. Default journalctl on PATH. */
  readonly journalctl?: string;
}

export interface Watch {
  readonly child: ChildProcess;
  /** Resolves with journalctl's exit code once it has stopped and forwarding has finished. */
  readonly done: Promise<number>;
  stop(): void;
}

/** journalctl -o json prints a value that is not valid text as an array of byte values. */
function text(v: unknown): unknown {
  if (Array.isArray(v) && v.every((b) => typeof b === 'number'))
    return Buffer.from(v as number[]).toString('utf8');
  return v;
}

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
  for (const [k, v] of Object.entries(raw)) if (k.startsWith('AGW_')) entry[k] = text(v);
  return entry;
}

export function watch(opts: WatchOptions): Watch {
  const args = ['-f', '-o', 'json', '--all', '-p', 'crit', `MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`];
  if (opts.namespace !== undefined) args.push(`--namespace=${opts.namespace}`);
  if (opts.since !== undefined) args.push(`--since=${opts.since}`);
  else args.push('--lines=0');
  const child = spawn(opts.journalctl ?? 'journalctl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let forwarding = Promise.resolve();
  createInterface({ input: child.stdout! }).on('line', (line) => {
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const entry = toEntry(raw);
    opts.onEntry(entry);
    const url = opts.forward;
    if (url !== undefined) forwarding = forwarding.then(() => post(url, entry, opts.onError));
  });
  createInterface({ input: child.stderr! }).on('line', (line) =>
    opts.onError(`journalctl: ${line}`),
  );
  const done = new Promise<number>((resolve) => {
    child.once('error', (err) => {
      opts.onError(`cannot run journalctl: ${err.message}`);
      resolve(127);
    });
    child.once('exit', (code, signal) => resolve(code ?? (signal === 'SIGTERM' ? 0 : 1)));
  }).then(async (code) => {
    await forwarding;
    return code;
  });
  return { child, done, stop: () => child.kill('SIGTERM') };
}

async function post(
  url: string,
  entry: Record<string, unknown>,
  onError: (m: string) => void,
): Promise<void> {
  let delay = 500;
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(entry),
        signal: AbortSignal.timeout(5000),
      });
      await res.arrayBuffer();
      if (res.ok) return;
      if (res.status < 500 && res.status !== 429) {
        onError(`forward to ${url} refused with ${res.status}; not retried`);
        return;
      }
    } catch {
      // network error: retried
    }
    if (attempt < 5) await new Promise((r) => setTimeout(r, delay));
    delay *= 2;
  }
  onError(`forward to ${url} failed 5 times; the entry is printed above and was not forwarded`);
}
