/**
 * Retention: messages older than AGW_RETENTION_DAYS go, with their deliveries, dead letters and
 * idempotency keys, except the contract kinds (kept indefinitely: the audit trail,
 * docs/reference/configuration.md, AGW_RETENTION_KEEP_KINDS; or for AGW_RETENTION_KEEP_DAYS when an
 * operator sets it) and messages a delivery still waits for. Runs at start and hourly, in groups of
 * 200 messages, each its own small transaction through the group commit, so a request never waits
 * behind more than one of them (a few milliseconds).
 *
 * The audit log has a horizon of its own (AGW_AUDIT_RETENTION_DAYS, 365): its entries older than
 * that go from the oldest end only, in the same batches, never the newest. Each batch (the
 * `prune_audit` op) moves the store's audit anchor in its own transaction: the last seq pruned
 * and its hash, which the first kept entry must follow, so verification tells a prune from
 * entries deleted behind the store's back (store/rules/audit-chain.ts).
 */
import type { Logger } from 'pino';
import type { GroupCommit } from './group-commit.js';

const DAY_MS = 24 * 3600 * 1000;
const HOUR_MS = 3600 * 1000;
/** Messages pruned per transaction: ~2-4 ms of deletes on this machine. */
const BATCH = 200;
/** The audit log's horizon when none is given (AGW_AUDIT_RETENTION_DAYS): a year. */
export const DEFAULT_AUDIT_RETENTION_DAYS = 365;

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
  /**
   * Days the audit log keeps its entries (AGW_AUDIT_RETENTION_DAYS). Default 365
   * (DEFAULT_AUDIT_RETENTION_DAYS).
   */
  readonly auditDays?: number;
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
    const auditDays = this.#o.auditDays ?? DEFAULT_AUDIT_RETENTION_DAYS;
    const at = now();
    const before = at - days * DAY_MS;
    let total = await this.#prune(before, keepKinds);
    // past their own horizon the kept kinds go too (a second sweep, nothing kept)
    const keptBefore = keepDays > 0 ? at - keepDays * DAY_MS : undefined;
    if (keptBefore !== undefined) total += await this.#prune(keptBefore, []);
    const auditBefore = at - auditDays * DAY_MS;
    const audit = await this.#pruneAudit(auditBefore);
    if (total > 0 || audit > 0) {
      const horizon = { before: new Date(before).toISOString() };
      if (keptBefore !== undefined)
        Object.assign(horizon, { kept_before: new Date(keptBefore).toISOString() });
      if (audit > 0)
        Object.assign(horizon, {
          audit_pruned: audit,
          audit_before: new Date(auditBefore).toISOString(),
        });
      logger.info({ pruned: total, ...horizon }, 'retention pass');
    }
    return total;
  }

  /** Prunes in batches the audit entries before `before`, from the oldest end. */
  async #pruneAudit(before: number): Promise<number> {
    const { commits, logger } = this.#o;
    let total = 0;
    for (;;) {
      try {
        const n = await commits.run({ op: 'prune_audit', before, limit: BATCH });
        total += n;
        if (n < BATCH) return total;
      } catch (err) {
        logger.error({ err }, 'audit log retention failed; it runs again within the hour');
        throw err;
      }
    }
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
