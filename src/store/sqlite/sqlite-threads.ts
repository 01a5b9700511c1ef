/**
 * Threads and their budgets (docs/reference/adapter-api.md, "Threads and budgets";
 * docs/design/threads.md), run inside the store's transaction: which message a reply names and
 * whether its sender could see it, the thread and hop a new message gets, the budgets that may
 * refuse it, the count kept per thread, and a thread's messages in commit order. SQLite has one
 * writer, so the count read and written here, in the transaction that stores the reply, cannot be
 * passed by concurrent replies.
 */
import type Database from 'better-sqlite3';
import { GatewayError } from '../../protocol/errors.js';
import { uuidv7Time } from '../../protocol/ids.js';
import {
  type Placement,
  ReplyRules,
  type TargetRow,
  type ThreadRow,
} from '../rules/thread-rows.js';
import type { BudgetReason, MessageDraft, ThreadBudgets } from '../store.js';
import { SQL } from './sql.js';
import type { Alerts } from './sqlite-alerts.js';

export class Threads {
  readonly #rules: ReplyRules;
  readonly #alerts: Alerts;
  readonly #s;

  constructor(db: Database.Database, budgets: ThreadBudgets, alertsTo: string, alerts: Alerts) {
    this.#rules = new ReplyRules(budgets, alertsTo);
    this.#alerts = alerts;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      byId: p<TargetRow>(SQL.replyById),
      bySeq: p<TargetRow>(SQL.replyBySeq),
      hadDelivery: p(SQL.hadDelivery).pluck(),
      count: p<number>(SQL.threadCount).pluck(),
      setCount: p(SQL.countThread),
      root: p<ThreadRow>(SQL.threadRoot),
      replies: p<ThreadRow>(SQL.threadReplies),
      prune: p(SQL.pruneThreads),
    };
  }

  /**
   * The thread and hop of a new message, or why it is refused: 404 reply_to_not_found (the
   * message it names is unknown, or one its sender could not see: the same answer, so a
   * stranger learns nothing of which ids exist), 422 for a budget (with its alert/budget
   * counted). Writes nothing but the alert's count; `record` counts the message once stored.
   */
  place(d: MessageDraft): Placement | GatewayError {
    const t = this.#target(d);
    if (t === undefined) return ReplyRules.ROOT;
    if (t instanceof GatewayError) return t;
    const h = this.#rules.hop(t, d);
    if (!('hop' in h)) return this.#refuse(h, t, d);
    const stored = h.continuation ? undefined : this.#s.count.get(t.thread_id);
    const p = this.#rules.placement(t, h, stored);
    return 'reason' in p ? this.#refuse(p, t, d) : p;
  }

  /** A placed reply was stored at `at`: its thread's count is now the placement's. */
  record(p: Placement, at: number): void {
    if (p.threadId !== null) this.#s.setCount.run(p.threadId, p.count, at);
  }

  /**
   * A thread's stored messages after the cursor `after` (a row id), in commit order: its root
   * first (every reply names a message stored before it, so the root has the thread's lowest
   * id), then its replies, read from the thread index `chunk` at a time for as long as the
   * caller iterates. Checksums are the caller's to verify.
   */
  *rows(threadId: string, after: number, chunk: number): Generator<ThreadRow> {
    const at = uuidv7Time(threadId);
    if (at === undefined) return;
    const root = this.#s.root.get(at, threadId, after);
    if (root !== undefined) yield root;
    let from = after;
    for (;;) {
      let seen = 0;
      for (const r of this.#s.replies.iterate(threadId, from, chunk)) {
        seen++;
        from = r.id;
        yield r;
      }
      if (seen < chunk) return;
    }
  }

  /**
   * Forgets the counts of threads with no message since `before` (retention's cutoff), up to
   * `limit`. A reply to a message kept longer (a contract kind) then starts its thread's count
   * afresh: a thread must have been quiet for the whole retention period first.
   */
  prune(before: number, limit: number): void {
    this.#s.prune.run(before, limit);
  }

  /** The message a draft answers, as its sender could see it (rules: replyTarget). */
  #target(d: MessageDraft): TargetRow | GatewayError | undefined {
    const seen = (t: TargetRow | undefined) =>
      t !== undefined && this.#visible(t, d) ? t : undefined;
    const id = d.replyToId ?? null;
    const at = id === null ? undefined : uuidv7Time(id);
    const byId = at === undefined ? undefined : seen(this.#s.byId.get(at, id));
    const bySeq = d.replyTo === null ? undefined : seen(this.#s.bySeq.get(d.channel, d.replyTo));
    return this.#rules.target(d, byId, bySeq);
  }

  /** Could the sender see this message (rules: seenWithoutDelivery, or a delivery of it)? */
  #visible(t: TargetRow, d: MessageDraft): boolean {
    if (this.#rules.seenWithoutDelivery(t, d)) return true;
    return this.#s.hadDelivery.get(t.id, d.sender) !== undefined;
  }

  /**
   * A budget refusal: nothing of the message is stored; alert/budget to alerts_to is counted
   * per (sender, reason), listing the message the refused one replied to (it has no id of its
   * own) and naming the latest thread: one agent refused in a thousand threads makes one alert
   * a window, not a thousand.
   */
  #refuse(
    r: { reason: BudgetReason; message: string },
    t: TargetRow,
    d: MessageDraft,
  ): GatewayError {
    this.#alerts.raise(d.sender, r.reason, t.message_id, 0, d.receivedAt, 1, t.thread_id);
    return new GatewayError(r.reason, r.message);
  }
}
