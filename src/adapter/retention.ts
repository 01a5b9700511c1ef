/**
 * Retention: messages older than AGW_RETENTION_DAYS go, with their deliveries, dead letters
 * and idempotency keys, except the contract kinds (kept indefinitely: the audit trail, seed 000
 * "Retention policy") and messages a delivery still waits for. Runs at start and hourly, in
 * groups of 200 messages, each its own small transaction through the group commit, so a request
 * never waits behind more than one of them (a few milliseconds).
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
  /** Kinds kept whatever their age. */
  readonly keepKinds: readonly string[];
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
    const { commits, now, days, keepKinds, logger } = this.#o;
    const before = now() - days * DAY_MS;
    let total = 0;
    for (;;) {
      try {
        const n = await commits.run({ op: 'prune', before, keep: keepKinds, limit: BATCH });
        total += n;
        if (n < BATCH) break;
      } catch (err) {
        logger.error({ err }, 'retention pass failed; it runs again within the hour');
        throw err;
      }
    }
    if (total > 0)
      logger.info({ pruned: total, before: new Date(before).toISOString() }, 'retention pass');
    return total;
  }
}
