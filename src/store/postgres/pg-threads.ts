/**
 * Threads and their budgets on PostgreSQL: the rules of rules/thread-rows.ts, with the count of a
 * thread read and written under that thread's lock (pg_advisory_xact_lock on its id), so that
 * replies committed by several replicas at once cannot pass its budget together. The message a
 * reply names is immutable, so its thread is resolved before any lock is taken and the group
 * locks its threads sorted, after its channels and agents.
 */
import type pg from 'pg';
import { GatewayError } from '../../protocol/errors.js';
import { uuidv7Time } from '../../protocol/ids.js';
import {
  type Placement,
  ReplyRules,
  type TargetRow,
  type ThreadRow,
} from '../rules/thread-rows.js';
import type { BudgetReason, MessageDraft, ThreadBudgets } from '../store.js';
import { PG_SQL } from './pg-sql.js';
import type { Tx } from './pg-tx.js';

export class PgThreads {
  readonly #rules: ReplyRules;

  constructor(budgets: ThreadBudgets, alertsTo: string) {
    this.#rules = new ReplyRules(budgets, alertsTo);
  }

  /**
   * The threads the drafts' replies name, as far as the messages they name are stored: the
   * group locks them before it runs. (A reply to a message of the same group is in a thread
   * another draft of it names, or in a new one nobody else can see yet.)
   */
  async threadsOf(tx: Tx, drafts: readonly MessageDraft[]): Promise<string[]> {
    // every read sent at once (one round trip, behind the group's locks)
    const found = await Promise.all(
      drafts.map((d) => {
        const byId = d.replyToId ?? null;
        if (byId !== null) return this.#byId(tx, byId);
        return d.replyTo === null ? undefined : this.#bySeq(tx, d.channel, d.replyTo);
      }),
    );
    return found.flatMap((t) => (t === undefined ? [] : [t.thread_id]));
  }

  /**
   * The counts of the threads this transaction holds, read in one statement sent behind their
   * locks (place() reads the ones it locks later itself).
   */
  async loadCounts(tx: Tx, threads: readonly string[]): Promise<void> {
    const want = threads.filter((t) => !tx.counts.has(t));
    if (want.length === 0) return;
    const rows = await tx.q<{ thread_id: string; count: number }>('threadCounts', [want]);
    for (const t of want) tx.counts.set(t, null);
    for (const r of rows) tx.counts.set(r.thread_id, r.count);
  }

  /** A message by id (immutable: found once, kept for the transaction). */
  async #byId(tx: Tx, messageId: string): Promise<TargetRow | undefined> {
    const k = `i${messageId}`;
    const known = tx.targets.get(k);
    if (known !== undefined) return known;
    const at = uuidv7Time(messageId);
    if (at === undefined) return undefined;
    const t = await tx.one<TargetRow>('replyById', [at, messageId]);
    if (t !== undefined) tx.targets.set(k, t);
    return t;
  }

  async #bySeq(tx: Tx, channel: string, seq: number): Promise<TargetRow | undefined> {
    const k = `s${seq} ${channel}`;
    const known = tx.targets.get(k);
    if (known !== undefined) return known;
    const t = await tx.one<TargetRow>('replyBySeq', [channel, seq]);
    if (t !== undefined) tx.targets.set(k, t);
    return t;
  }

  /** The thread and hop of a new message, or its refusal (rules/thread-rows.ts). */
  async place(tx: Tx, d: MessageDraft): Promise<Placement | GatewayError> {
    const t = await this.#target(tx, d);
    if (t === undefined) return ReplyRules.ROOT;
    if (t instanceof GatewayError) return t;
    // a thread the group did not lock before (its message committed since): locked now, and
    // every statement sent after this runs under it
    tx.lockThreads([t.thread_id]);
    const h = this.#rules.hop(t, d);
    if (!('hop' in h)) return this.#refuse(tx, h, t, d);
    if (!h.continuation) await this.loadCounts(tx, [t.thread_id]);
    const stored = h.continuation ? undefined : tx.counts.get(t.thread_id);
    const p = this.#rules.placement(t, h, stored);
    return 'reason' in p ? this.#refuse(tx, p, t, d) : p;
  }

  record(tx: Tx, p: Placement, at: number): void {
    if (p.threadId === null) return;
    tx.write('countThread', [p.threadId, p.count, at]);
    tx.counts.set(p.threadId, p.count);
  }

  prune(tx: Tx, before: number, limit: number): void {
    tx.write('pruneThreads', [before, limit]);
  }

  /**
   * A thread's stored messages after `after`, in commit order, `chunk` at a time, and no more
   * than reach `maxBytes` (each counted with `perItem` beside it; the first always): a page's
   * byte bound, so that a chunk of 256 bodies of 256 KiB (64 MiB) is never fetched for an 8 MiB
   * page. `read` runs each query (a page read's slot of the pool).
   */
  async *rows(
    read: <R>(run: () => Promise<R>) => Promise<R>,
    db: pg.Pool,
    threadId: string,
    after: number,
    chunk: number,
    maxBytes: number,
    perItem: number,
  ): AsyncGenerator<ThreadRow> {
    const at = uuidv7Time(threadId);
    if (at === undefined) return;
    const q = (name: 'threadRoot' | 'threadReplies', values: unknown[]) =>
      read(async () => (await db.query<ThreadRow>({ name, text: PG_SQL[name], values })).rows);
    let left = Math.min(maxBytes, Number.MAX_SAFE_INTEGER);
    const [root] = await q('threadRoot', [at, threadId, after]);
    if (root !== undefined) {
      left -= Buffer.byteLength(root.body) + perItem;
      yield root;
    }
    let from = after;
    // without a root, a bound of 0 still reads the first reply (a page holds one however large)
    if (root === undefined) left = Math.max(left, 1);
    while (left > 0) {
      const rows = await q('threadReplies', [threadId, from, chunk, left, perItem]);
      for (const r of rows) {
        from = r.id;
        left -= Buffer.byteLength(r.body) + perItem;
        yield r;
      }
      if (rows.length < chunk) return;
    }
  }

  /** The message a draft answers, as its sender could see it (rules: replyTarget). */
  async #target(tx: Tx, d: MessageDraft): Promise<TargetRow | GatewayError | undefined> {
    const seen = async (t: TargetRow | undefined) =>
      t !== undefined && (await this.#visible(tx, t, d)) ? t : undefined;
    const id = d.replyToId ?? null;
    const byId = id === null ? undefined : await seen(await this.#byId(tx, id));
    const bySeq =
      d.replyTo === null ? undefined : await seen(await this.#bySeq(tx, d.channel, d.replyTo));
    return this.#rules.target(d, byId, bySeq);
  }

  async #visible(tx: Tx, t: TargetRow, d: MessageDraft): Promise<boolean> {
    if (this.#rules.seenWithoutDelivery(t, d)) return true;
    return (await tx.one('hadDelivery', [t.id, d.sender])) !== undefined;
  }

  /** Per (sender, reason), the latest thread in the row's `sender`, as the SQLite store counts it. */
  #refuse(
    tx: Tx,
    r: { reason: BudgetReason; message: string },
    t: TargetRow,
    d: MessageDraft,
  ): GatewayError {
    tx.raise(d.sender, r.reason, t.message_id, 0, d.receivedAt, 1, t.thread_id);
    return new GatewayError(r.reason, r.message);
  }
}
