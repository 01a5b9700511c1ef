/**
 * The emergency channel: priority=CRIT journald entries that bypass the adapter entirely
 * (seed 000, "Emergency channel"). The orchestrator follows them with `agent-gateway watch`
 * (journalctl, matching MESSAGE_ID).
 */
import type { JournalWriter } from './writer.js';

/** The fixed MESSAGE_ID of gateway emergencies (CONTRACT.md). */
export const EMERGENCY_MESSAGE_ID = '80911d6a6b994fc880b96a0641d4e224';

export const AUTOMATIC_REASONS = [
  'adapter_unreachable',
  'circuit_open',
  'outbox_full',
  'dead_letter',
  'integrity',
] as const;
export type EmergencyReason = (typeof AUTOMATIC_REASONS)[number] | 'manual' | (string & {});

export interface Emergency {
  readonly reason: EmergencyReason;
  readonly message: string;
  /** Extra fields; keys are normalized to journald's form (AGW_ is not added). */
  readonly fields?: Record<string, string | number | boolean>;
}

export interface EmergencyOptions {
  readonly agentId: string;
  /** From POD_NAME and POD_NAMESPACE when set. */
  readonly pod?: string | undefined;
  readonly namespace?: string | undefined;
  /** Automatic emergencies: at most one per reason in this window, ms. Default 30,000. */
  readonly windowMs?: number;
  /**
   * Explicit emergencies are not rate-limited below this many per window (default 1,000 per
   * 30 s): far above what any agent should raise, low enough that a loop cannot fill the journal.
   */
  readonly explicitBound?: number;
  readonly now?: () => number;
}

interface Window {
  openedAt: number;
  count: number;
  suppressed: number;
  timer?: NodeJS.Timeout;
}

export class Emergencies {
  readonly #writer: JournalWriter;
  readonly #o: Required<Omit<EmergencyOptions, 'pod' | 'namespace'>> &
    Pick<EmergencyOptions, 'pod' | 'namespace'>;
  readonly #windows = new Map<string, Window>();

  constructor(writer: JournalWriter, opts: EmergencyOptions) {
    this.#writer = writer;
    this.#o = { windowMs: 30_000, explicitBound: 1000, now: Date.now, ...opts };
  }

  /**
   * Writes a CRIT entry, unless the rate limit holds it back (then it is counted and the count
   * goes out with the next entry of that reason, or on its own when the window ends). Returns
   * whether it was written now.
   */
  raise(e: Emergency, opts: { explicit?: boolean } = {}): boolean {
    const explicit = opts.explicit ?? e.reason === 'manual';
    const key = `${explicit ? 'explicit' : 'auto'}:${e.reason}`;
    const limit = explicit ? this.#o.explicitBound : 1;
    const now = this.#o.now();
    let w = this.#windows.get(key);
    if (w === undefined || now - w.openedAt >= this.#o.windowMs) {
      if (w?.timer) clearTimeout(w.timer);
      w = { openedAt: now, count: 0, suppressed: w?.suppressed ?? 0 };
      this.#windows.set(key, w);
    }
    if (w.count >= limit) {
      w.suppressed++;
      if (w.timer === undefined) {
        const win = w;
        win.timer = setTimeout(
          () => this.#summary(key, e.reason, win),
          win.openedAt + this.#o.windowMs - now,
        );
        win.timer.unref();
      }
      return false;
    }
    w.count++;
    const suppressed = w.suppressed;
    w.suppressed = 0;
    this.#write(e, suppressed);
    return true;
  }

  #summary(key: string, reason: string, w: Window): void {
    w.timer = undefined;
    if (w.suppressed === 0 || this.#windows.get(key) !== w) return;
    const n = w.suppressed;
    w.suppressed = 0;
    w.openedAt = this.#o.now();
    w.count = 1;
    this.#write(
      { reason, message: `${n} more ${reason} emergencies were held back by the rate limit` },
      n,
    );
  }

  #write(e: Emergency, suppressed: number): void {
    this.#writer.write({
      ...e.fields,
      PRIORITY: 2,
      MESSAGE: e.message,
      SYSLOG_IDENTIFIER: 'agent-gateway',
      MESSAGE_ID: EMERGENCY_MESSAGE_ID,
      AGW_AGENT_ID: this.#o.agentId,
      AGW_REASON: e.reason,
      AGW_POD: this.#o.pod,
      AGW_NAMESPACE: this.#o.namespace,
      AGW_SUPPRESSED: suppressed > 0 ? suppressed : undefined,
    });
  }
}
