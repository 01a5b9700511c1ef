/**
 * Threads and their budgets (CONTRACT.md, "Threads and budgets"; docs/design/threads.md), run
 * inside the store's transaction: which message a reply names and whether its sender could see
 * it, the thread and hop a new message gets, the budgets that may refuse it, the count kept per
 * thread, and a thread's messages in commit order. SQLite has one writer, so the count read and
 * written here, in the transaction that stores the reply, cannot be passed by concurrent replies.
 */
import type Database from 'better-sqlite3';
import { GatewayError } from '../protocol/errors.js';
import { uuidv7Time } from '../protocol/ids.js';
import { SQL } from './sql.js';
import type { Alerts } from './sqlite-alerts.js';
import type { BudgetReason, MessageDraft, ThreadBudgets } from './store.js';
import type { Placement, ThreadRow } from './thread-rows.js';

/** The message a reply names. */
interface TargetRow {
  id: number;
  message_id: string;
  channel: string;
  sender: string;
  /** Its thread: its own message_id when it started one. */
  thread_id: string;
  hop: number;
}

const ROOT: Placement = { threadId: null, hop: 0, replyTo: null, count: 0 };

export class Threads {
  readonly #budgets: ThreadBudgets;
  readonly #alertsTo: string;
  readonly #alerts: Alerts;
  readonly #s;

  constructor(db: Database.Database, budgets: ThreadBudgets, alertsTo: string, alerts: Alerts) {
    this.#budgets = budgets;
    this.#alertsTo = alertsTo;
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
    if (t === undefined) return ROOT;
    if (t instanceof GatewayError) return t;
    // A message of alerts_to in a thread is a continuation: the operator read it and lets the
    // conversation go on, so its chain and the thread's count start again, itself counted.
    const continuation = d.sender === this.#alertsTo;
    const hop = continuation ? 0 : t.hop + 1;
    if (hop > this.#budgets.hops) {
      return this.#refuse(
        'hop_budget_exceeded',
        t,
        d,
        `a reply to ${t.message_id} would be hop ${hop} of its chain, past AGW_HOP_BUDGET (${this.#budgets.hops}); ${this.#alertsTo} (alerts_to) may continue thread ${t.thread_id}`,
      );
    }
    // No row yet: the thread holds its root alone (rows are kept for threads with replies).
    const count = continuation ? 1 : (this.#s.count.get(t.thread_id) ?? 1) + 1;
    if (count > this.#budgets.messages) {
      return this.#refuse(
        'thread_budget_exceeded',
        t,
        d,
        `thread ${t.thread_id} holds ${count - 1} messages of agents since its last continuation, its AGW_THREAD_BUDGET; ${this.#alertsTo} (alerts_to) may continue it`,
      );
    }
    return { threadId: t.thread_id, hop, replyTo: t.message_id, count };
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

  /** The message a draft answers; undefined when it answers none. */
  #target(d: MessageDraft): TargetRow | GatewayError | undefined {
    const byId = d.replyToId ?? null;
    let t: TargetRow | undefined;
    if (byId !== null) {
      const at = uuidv7Time(byId);
      t = at === undefined ? undefined : this.#s.byId.get(at, byId);
      if (t === undefined || !this.#visible(t, d)) {
        return new GatewayError(
          'reply_to_not_found',
          `reply_to ${byId} names no message ${d.sender} could see`,
          { field: 'reply_to' },
        );
      }
    }
    if (d.replyTo !== null) {
      const s = this.#s.bySeq.get(d.channel, d.replyTo);
      if (s === undefined || !this.#visible(s, d)) {
        return new GatewayError(
          'reply_to_not_found',
          `reply_to_sequence_id ${d.replyTo} names no message of ${d.channel} ${d.sender} could see`,
          { field: 'reply_to_sequence_id' },
        );
      }
      if (t !== undefined && t.id !== s.id) {
        return new GatewayError(
          'invalid_envelope',
          `reply_to (${t.message_id}) and reply_to_sequence_id (${s.message_id}) name different messages; give one`,
          { field: 'reply_to_sequence_id' },
        );
      }
      t = s;
    }
    return t;
  }

  /**
   * Could the sender see this message? It sent it; it may replay its channel (a member, or the
   * '@agent' it owns); it had a delivery of it (a dead letter's replay included). alerts_to sees
   * every thread.
   */
  #visible(t: TargetRow, d: MessageDraft): boolean {
    return (
      t.sender === d.sender ||
      d.sender === this.#alertsTo ||
      d.readable?.has(t.channel) === true ||
      this.#s.hadDelivery.get(t.id, d.sender) !== undefined
    );
  }

  /**
   * A budget refusal: nothing of the message is stored; alert/budget to alerts_to is counted
   * per (sender, reason), listing the message the refused one replied to (it has no id of its
   * own) and naming the latest thread: one agent refused in a thousand threads makes one alert
   * a window, not a thousand.
   */
  #refuse(reason: BudgetReason, t: TargetRow, d: MessageDraft, message: string): GatewayError {
    this.#alerts.raise(d.sender, reason, t.message_id, 0, d.receivedAt, 1, t.thread_id);
    return new GatewayError(reason, message);
  }
}
