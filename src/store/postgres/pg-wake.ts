/**
 * Cross-replica wake-ups: every commit that wakes agents or changes timing announces it with
 * pg_notify (delivered at COMMIT) on WAKE_CHANNEL; each store LISTENs on a dedicated connection
 * and tells its watchers what the other replicas did. Notifications are lost when that
 * connection drops (a failover, pg_terminate_backend, a PgBouncer in transaction mode): it
 * reconnects with a capped backoff and then tells its watchers "everyone, timing changed", and
 * the adapter's safety poll (safetyPollMs) covers the gap meanwhile.
 */
import pg from 'pg';
import type { ForeignEffects } from '../store.js';
import { WAKE_CHANNEL } from './pg-sql.js';

/** ForeignEffects, and "wake every parked poll" when a notice was too long or missed. */
export type PgForeignEffects = ForeignEffects & { readonly everyone?: boolean };

/** Past this a notice names nobody and wakes everyone (NOTIFY's limit is 8,000 bytes). */
const MAX_PAYLOAD = 7000;

const RECONNECT_MIN_MS = 50;
const RECONNECT_MAX_MS = 5000;

/** The payload of one commit's notice, or null when there is nothing to announce. */
export function wakePayload(
  instance: string,
  woken: ReadonlySet<string>,
  timingChanged: boolean,
): string | null {
  if (woken.size === 0 && !timingChanged) return null;
  const json = JSON.stringify({ i: instance, w: [...woken], t: timingChanged });
  if (Buffer.byteLength(json) <= MAX_PAYLOAD) return json;
  return JSON.stringify({ i: instance, all: true, t: true });
}

export class PgWake {
  readonly #config: pg.ClientConfig;
  readonly #instance: string;
  readonly #listeners: ((fx: PgForeignEffects) => void)[] = [];
  #client: pg.Client | undefined;
  #closed = false;
  #backoff = RECONNECT_MIN_MS;
  #timer: NodeJS.Timeout | undefined;
  /** Reconnections so far (for tests). */
  reconnects = 0;

  constructor(config: pg.ClientConfig, instance: string) {
    this.#config = config;
    this.#instance = instance;
  }

  watch(listener: (fx: PgForeignEffects) => void): void {
    this.#listeners.push(listener);
  }

  /** The backend pid of the LISTEN connection, when connected (for tests). */
  pid: number | undefined;

  /** Connects and listens; resolves once listening (rejects if the first attempt fails). */
  async start(): Promise<void> {
    await this.#connect();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    const c = this.#client;
    this.#client = undefined;
    if (c !== undefined) await c.end().catch(() => undefined);
  }

  async #connect(): Promise<void> {
    const c = new pg.Client({ ...this.#config, application_name: 'agw-listen' });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (this.#client === c) this.#client = undefined;
      this.pid = undefined;
      c.end().catch(() => undefined);
      this.#scheduleReconnect();
    };
    c.on('error', onLost);
    c.on('end', onLost);
    c.on('notification', (n) => {
      if (n.channel === WAKE_CHANNEL && n.payload !== undefined) this.#notice(n.payload);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${WAKE_CHANNEL}`);
      const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      this.pid = rows[0]?.pid;
    } catch (err) {
      lost = true;
      await c.end().catch(() => undefined);
      throw err;
    }
    if (this.#closed) {
      await c.end().catch(() => undefined);
      return;
    }
    this.#client = c;
    this.#backoff = RECONNECT_MIN_MS;
  }

  #scheduleReconnect(): void {
    if (this.#closed || this.#timer !== undefined) return;
    const wait = this.#backoff;
    this.#backoff = Math.min(RECONNECT_MAX_MS, this.#backoff * 2);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#closed) return;
      this.#connect().then(
        () => {
          if (this.#closed) return;
          this.reconnects++;
          // what was announced while away is unknown: everyone, and timing
          this.#tell({ woken: new Set(), timingChanged: true, everyone: true });
        },
        () => this.#scheduleReconnect(),
      );
    }, wait);
    this.#timer.unref();
  }

  #notice(payload: string): void {
    let n: { i?: string; w?: string[]; t?: boolean; all?: boolean };
    try {
      n = JSON.parse(payload) as typeof n;
    } catch {
      return;
    }
    if (n.i === this.#instance) return; // our own commit: its effects came back with it
    if (n.all === true) this.#tell({ woken: new Set(), timingChanged: true, everyone: true });
    else this.#tell({ woken: new Set(n.w ?? []), timingChanged: n.t === true });
  }

  #tell(fx: PgForeignEffects): void {
    for (const l of this.#listeners) {
      try {
        l(fx);
      } catch {
        // a watcher's failure is its own; the others are still told
      }
    }
  }
}
