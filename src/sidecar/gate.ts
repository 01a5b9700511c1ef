/**
 * The start gate: the sidecar polls the adapter's /health with the one backoff until it answers
 * 200 once and the start check passes (the token is the agent's); then /readyz turns 200 and
 * stays so (the outbox covers later outages). If the gate is still shut after startupAlarmS, a
 * CRIT adapter_unreachable entry says so.
 */
import type { AdapterClient } from './adapter-client.js';
import { type BackoffOptions, backoff } from './backoff.js';
import type { SidecarEventMap } from './events.js';

export interface StartGateOptions {
  readonly client: AdapterClient;
  readonly backoff: BackoffOptions;
  readonly startupAlarmS: number;
  /** Where the gate tells 'gate:alarm' (still shut after startupAlarmS) and 'gate:open'. */
  readonly events: SidecarEventMap;
  /**
   * Asked once /health has answered 200, before the gate opens: true opens it, false tries
   * again after the backoff (the adapter went away meanwhile). It may also end the sidecar.
   */
  readonly check?: () => Promise<boolean>;
}

export class StartGate {
  /** Resolves once the gate opened. */
  readonly opened: Promise<void>;
  readonly #o: StartGateOptions;
  #open = false;
  #resolve: () => void = () => {};
  #timer: NodeJS.Timeout | undefined;
  #alarm: NodeJS.Timeout | undefined;
  #step = 0;
  #stopped = false;

  constructor(opts: StartGateOptions) {
    this.#o = opts;
    this.opened = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  get isOpen(): boolean {
    return this.#open;
  }

  start(): void {
    this.#alarm = setTimeout(() => {
      if (!this.#open) this.#o.events.emit('gate:alarm', this.#o.startupAlarmS);
    }, this.#o.startupAlarmS * 1000);
    this.#alarm.unref();
    void this.#probe();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#alarm !== undefined) clearTimeout(this.#alarm);
  }

  async #probe(): Promise<void> {
    this.#timer = undefined;
    if ((await this.#o.client.health()) && (await (this.#o.check?.() ?? true))) {
      this.#open = true;
      if (this.#alarm !== undefined) clearTimeout(this.#alarm);
      this.#o.events.emit('gate:open');
      this.#resolve();
      return;
    }
    if (this.#stopped) return;
    const wait = Math.max(50, backoff(this.#step++, this.#o.backoff));
    this.#timer = setTimeout(() => void this.#probe(), wait);
  }
}
