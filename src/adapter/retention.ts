/**
 * Retention: messages older than AGW_RETENTION_DAYS go, with their deliveries, dead letters and
 * idempotency keys, except the contract kinds (kept indefinitely: the audit trail,
 * docs/reference/configuration.md, AGW_RETENTION_KEEP_KINDS; or for AGW_RETENTION_KEEP_DAYS when an
 * operator sets it) and messages a delivery still waits for. Runs at start and hourly, in groups of
 * 200 messages, each its own small transaction through the group commit, so a request never waits
 * behind more than one of them (a few milliseconds).
 */
import type { Logger } from 'pino';
import type { GroupCommit } from './group-commit.js';

const DAY_MS = 24 * 3600 * 1000;
const HOUR_MS = 3600 * 1000;
/** Messages pruned per transaction: ~2-4 ms of deletes on this machine. */
const BATCH = 200;

export interface RetentionOptions {
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
  readonly days: number;
  /** Kinds kept past `days`. */
  readonly keepKinds: readonly string[];
  /**
   * Days after which the kept kinds go too (AGW_RETENTION_KEEP_DAYS), still never a message a
   * delivery waits for; 0: kept for ever. The way out when kept kinds fill the store.
   */
  readonly keepDays?: number;
}

export class Retention {
  readonly #o: RetentionOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<number> | undefined;

  constructor(opts: RetentionOptions) {
    this.#o = opts;
  }

  start(): void {
    this.run().catch(() => {});
    this.#timer = setInterval(() => this.run().catch(() => {}), HOUR_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
  }

  /** One pass; resolves with how many messages went. Overlapping calls share the pass. */
  run(): Promise<number> {
    this.#running ??= this.#pass().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async #pass(): Promise<number> {
    const { now, days, keepKinds, keepDays = 0, logger } = this.#o;
    const at = now();
    const before = at - days * DAY_MS;
    let total = await this.#prune(before, keepKinds);
    // past their own horizon the kept kinds go too (a second sweep, nothing kept)
    const keptBefore = keepDays > 0 ? at - keepDays * DAY_MS : undefined;
    if (keptBefore !== undefined) total += await this.#prune(keptBefore, []);
    if (total > 0) {
      const horizon = { before: new Date(before).toISOString() };
      if (keptBefore !== undefined)
        Object.assign(horizon, { kept_before: new Date(keptBefore).toISOString() });
      logger.info({ pruned: total, ...horizon }, 'retention pass');
    }
    return total;
  }

  /** Prunes in batches every message received before `before` but kinds in `keep`. */
  async #prune(before: number, keep: readonly string[]): Promise<number> {
    const { commits, logger } = this.#o;
    let total = 0;
    for (;;) {
      try {
        const n = await commits.run({ op: 'prune', before, keep, limit: BATCH });
        total += n;
        if (n < BATCH) return total;
      } catch (err) {
        logger.error({ err }, 'retention pass failed; it runs again within the hour');
        throw err;
      }
    }
  }
}
