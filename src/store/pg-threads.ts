/**
 * Threads and their budgets on PostgreSQL: the rules of sqlite-threads.ts, with the count of a
 * thread read and written under that thread's lock (pg_advisory_xact_lock on its id), so that
 * replies committed by several replicas at once cannot pass its budget together. The message a
 * reply names is immutable, so its thread is resolved before any lock is taken and the group
 * locks its threads sorted, after its channels and agents.
 */
import type pg from 'pg';
import { GatewayError } from '../protocol/errors.js';
import { uuidv7Time } from '../protocol/ids.js';
import { PG_SQL } from './pg-sql.js';
import type { Tx } from './pg-tx.js';
import type { Placement, ThreadRow } from './sqlite-threads.js';
import type { BudgetReason, MessageDraft, ThreadBudgets } from './store.js';

interface TargetRow {
  id: number;
  message_id: string;
  channel: string;
  sender: string;
  thread_id: string;
  hop: number;
}

const ROOT: Placement = { threadId: null, hop: 0, replyTo: null, count: 0 };

export class PgThreads {
  readonly #budgets: ThreadBudgets;
  readonly #alertsTo: string;

  constructor(budgets: ThreadBudgets, alertsTo: string) {
    this.#budgets = budgets;
    this.#alertsTo = alertsTo;
  }

  /**
   * The threads the drafts' replies name, as far as the messages they name are stored: the
   * group locks them before it runs. (A reply to a message of the same group is in a thread
   * another draft of it names, or in a new one nobody else can see yet.)
   */
  async threadsOf(tx: Tx, drafts: readonly MessageDraft[]): Promise<string[]> {
    const out: string[] = [];
    for (const d of drafts) {
      const byId = d.replyToId ?? null;
      if (byId !== null) {
        const at = uuidv7Time(byId);
        const t = at === undefined ? undefined : await tx.one<TargetRow>('replyById', [at, byId]);
        if (t !== undefined) out.push(t.thread_id);
      } else if (d.replyTo !== null) {
        const t = await tx.one<TargetRow>('replyBySeq', [d.channel, d.replyTo]);
        if (t !== undefined) out.push(t.thread_id);
      }
    }
    return out;
  }

  /** As sqlite-threads.ts place(): the thread and hop of a new message, or its refusal. */
  async place(tx: Tx, d: MessageDraft): Promise<Placement | GatewayError> {
    const t = await this.#target(tx, d);
    if (t === undefined) return ROOT;
    if (t instanceof GatewayError) return t;
    // a thread the group did not lock before (its message committed since): locked now
    await tx.lockThreads([t.thread_id]);
    const continuation = d.sender === this.#alertsTo;
    const hop = continuation ? 0 : t.hop + 1;
    if (hop > this.#budgets.hops) {
      return this.#refuse(
        tx,
        'hop_budget_exceeded',
        t,
        d,
        `a reply to ${t.message_id} would be hop ${hop} of its chain, past AGW_HOP_BUDGET (${this.#budgets.hops}); ${this.#alertsTo} (alerts_to) may continue thread ${t.thread_id}`,
      );
    }
    const stored = continuation
      ? undefined
      : await tx.one<{ count: number }>('threadCount', [t.thread_id]);
    const count = continuation ? 1 : (stored?.count ?? 1) + 1;
    if (count > this.#budgets.messages) {
      return this.#refuse(
        tx,
        'thread_budget_exceeded',
        t,
        d,
        `thread ${t.thread_id} holds ${count - 1} messages of agents since its last continuation, its AGW_THREAD_BUDGET; ${this.#alertsTo} (alerts_to) may continue it`,
      );
    }
    return { threadId: t.thread_id, hop, replyTo: t.message_id, count };
  }

  async record(tx: Tx, p: Placement, at: number): Promise<void> {
    if (p.threadId !== null) await tx.q('countThread', [p.threadId, p.count, at]);
  }

  async prune(tx: Tx, before: number, limit: number): Promise<void> {
    await tx.q('pruneThreads', [before, limit]);
  }

  /** A thread's stored messages after `after`, in commit order, `chunk` at a time. */
  async *rows(
    db: pg.Pool,
    threadId: string,
    after: number,
    chunk: number,
  ): AsyncGenerator<ThreadRow> {
    const at = uuidv7Time(threadId);
    if (at === undefined) return;
    const q = async (name: 'threadRoot' | 'threadReplies', values: unknown[]) =>
      (await db.query<ThreadRow>({ name, text: PG_SQL[name], values })).rows;
    const [root] = await q('threadRoot', [at, threadId, after]);
    if (root !== undefined) yield root;
    let from = after;
    for (;;) {
      const rows = await q('threadReplies', [threadId, from, chunk]);
      for (const r of rows) {
        from = r.id;
        yield r;
      }
      if (rows.length < chunk) return;
    }
  }

  async #target(tx: Tx, d: MessageDraft): Promise<TargetRow | GatewayError | undefined> {
    const byId = d.replyToId ?? null;
    let t: TargetRow | undefined;
    if (byId !== null) {
      const at = uuidv7Time(byId);
      t = at === undefined ? undefined : await tx.one<TargetRow>('replyById', [at, byId]);
      if (t === undefined || !(await this.#visible(tx, t, d))) {
        return new GatewayError(
          'reply_to_not_found',
          `reply_to ${byId} names no message ${d.sender} could see`,
          { field: 'reply_to' },
        );
      }
    }
    if (d.replyTo !== null) {
      const s = await tx.one<TargetRow>('replyBySeq', [d.channel, d.replyTo]);
      if (s === undefined || !(await this.#visible(tx, s, d))) {
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

  async #visible(tx: Tx, t: TargetRow, d: MessageDraft): Promise<boolean> {
    if (t.sender === d.sender || d.sender === this.#alertsTo || d.readable?.has(t.channel) === true)
      return true;
    return (await tx.one('hadDelivery', [t.id, d.sender])) !== undefined;
  }

  #refuse(
    tx: Tx,
    reason: BudgetReason,
    t: TargetRow,
    d: MessageDraft,
    message: string,
  ): GatewayError {
    tx.raise(t.thread_id, reason, t.message_id, 0, d.receivedAt, 1, d.sender);
    return new GatewayError(reason, message);
  }
}
