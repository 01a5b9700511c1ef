/**
 * What both engines' thread code shares: a thread page's row, where an accepted message goes in
 * its thread, and the thread fields of rows stored before threads existed
 * (docs/design/threads.md). Engine-neutral, so neither engine imports the other's files.
 */
import { GatewayError } from '../../protocol/errors.js';
import { messageIdOf } from '../../protocol/wire.js';
import type { BudgetReason, MessageDraft, ThreadBudgets } from '../store.js';

/** A stored message as a thread page reads it. */
export interface ThreadRow {
  id: number;
  body: string;
  checksum: number;
}

/** Where an accepted message goes. */
export interface Placement {
  /** Its thread; null when it starts one (the thread is then its own message_id). */
  readonly threadId: string | null;
  readonly hop: number;
  /** The message_id of the message it answers, when it answers one. */
  readonly replyTo: string | null;
  /** Its thread's count of messages of agents once it is stored (a reply's; 0 for a root). */
  readonly count: number;
}

/**
 * A stored message's JSON with thread_id and hop. Rows written before migration 4 lack them;
 * such a row started its own thread (its thread_id column is NULL, its hop 0), and the two
 * fields are put where a new row has them, before the payload: the first `,"payload":` is the
 * envelope's own, since string values escape their quotes. A new row is returned as it is,
 * after a look at the ~300 bytes of its head.
 */
export function withThreadFields(body: string): string {
  const at = body.indexOf(',"payload":');
  if (at < 0 || body.lastIndexOf(',"hop":', at) >= 0) return body;
  return `${body.slice(0, at)},"thread_id":"${messageIdOf(body)}","hop":0${body.slice(at)}`;
}

/** The message a reply names (immutable once stored). */
export interface TargetRow {
  id: number;
  message_id: string;
  channel: string;
  sender: string;
  /** Its thread: its own message_id when it started one. */
  thread_id: string;
  hop: number;
}

/** A message that answers none: it starts its own thread. */
export const ROOT: Placement = { threadId: null, hop: 0, replyTo: null, count: 0 };

/** A reply refused by a budget (422, with its alert/budget counted). */
export interface BudgetRefusal {
  readonly reason: BudgetReason;
  readonly message: string;
}

/**
 * Whether the sender could see a message without a delivery of it: it sent it, it is alerts_to
 * (which sees every thread), or it may replay its channel (a member, or the '@agent' it owns).
 * When not, the engine asks whether it had a delivery of it (a dead letter's replay included).
 */
export function seenWithoutDelivery(t: TargetRow, d: MessageDraft, alertsTo: string): boolean {
  return (
    t.sender === d.sender ||
    overseesThreads(d.sender, alertsTo) ||
    d.readable?.has(t.channel) === true
  );
}

/**
 * The message a draft answers, from what the engine found for its `reply_to` (byId) and its
 * `reply_to_sequence_id` (bySeq), each only if its sender could see it; undefined when it
 * answers none. 404 reply_to_not_found for one unknown or unseen (the same answer, so a stranger
 * learns nothing of which ids exist); 422 when the two name different messages.
 */
export function replyTarget(
  d: MessageDraft,
  byId: TargetRow | undefined,
  bySeq: TargetRow | undefined,
): TargetRow | GatewayError | undefined {
  const id = d.replyToId ?? null;
  if (id !== null && byId === undefined) {
    return new GatewayError(
      'reply_to_not_found',
      `reply_to ${id} names no message ${d.sender} could see`,
      {
        field: 'reply_to',
      },
    );
  }
  if (d.replyTo === null) return byId;
  if (bySeq === undefined) {
    return new GatewayError(
      'reply_to_not_found',
      `reply_to_sequence_id ${d.replyTo} names no message of ${d.channel} ${d.sender} could see`,
      { field: 'reply_to_sequence_id' },
    );
  }
  if (byId !== undefined && byId.id !== bySeq.id) {
    return new GatewayError(
      'invalid_envelope',
      `reply_to (${byId.message_id}) and reply_to_sequence_id (${bySeq.message_id}) name different messages; give one`,
      { field: 'reply_to_sequence_id' },
    );
  }
  return bySeq;
}

/**
 * Whether `sender` oversees threads: alerts_to, or an operator (`operator:<id>`, a person: its
 * message in a thread is a continuation too, and it may reply to any message).
 */
export function overseesThreads(sender: string, alertsTo: string): boolean {
  return sender === alertsTo || sender.startsWith('operator:');
}

/**
 * A reply's hop, or its refusal past AGW_HOP_BUDGET. A message of alerts_to in a thread is a
 * continuation: the operator read it and lets the conversation go on, so its chain and the
 * thread's count start again, itself counted.
 */
export function replyHop(
  t: TargetRow,
  d: MessageDraft,
  budgets: ThreadBudgets,
  alertsTo: string,
): { hop: number; continuation: boolean } | BudgetRefusal {
  const continuation = overseesThreads(d.sender, alertsTo);
  const hop = continuation ? 0 : t.hop + 1;
  if (hop <= budgets.hops) return { hop, continuation };
  return {
    reason: 'hop_budget_exceeded',
    message: `a reply to ${t.message_id} would be hop ${hop} of its chain, past AGW_HOP_BUDGET (${budgets.hops}); ${alertsTo} (alerts_to) may continue thread ${t.thread_id}`,
  };
}

/**
 * Where a reply goes, or its refusal past AGW_THREAD_BUDGET. `stored`: the thread's count as
 * kept (undefined: no row yet, the thread holds its root alone; not read for a continuation).
 */
export function replyPlacement(
  t: TargetRow,
  h: { hop: number; continuation: boolean },
  stored: number | null | undefined,
  budgets: ThreadBudgets,
  alertsTo: string,
): Placement | BudgetRefusal {
  const count = h.continuation ? 1 : (stored ?? 1) + 1;
  if (count > budgets.messages) {
    return {
      reason: 'thread_budget_exceeded',
      message: `thread ${t.thread_id} holds ${count - 1} messages of agents since its last continuation, its AGW_THREAD_BUDGET; ${alertsTo} (alerts_to) may continue it`,
    };
  }
  return { threadId: t.thread_id, hop: h.hop, replyTo: t.message_id, count };
}

/** The reply rules above with a store's budgets and alerts_to, as an engine's threads use them. */
export class ReplyRules {
  /** A message that answers none. */
  static readonly ROOT = ROOT;

  constructor(
    readonly budgets: ThreadBudgets,
    readonly alertsTo: string,
  ) {}

  seenWithoutDelivery(t: TargetRow, d: MessageDraft): boolean {
    return seenWithoutDelivery(t, d, this.alertsTo);
  }

  target(d: MessageDraft, byId: TargetRow | undefined, bySeq: TargetRow | undefined) {
    return replyTarget(d, byId, bySeq);
  }

  hop(t: TargetRow, d: MessageDraft) {
    return replyHop(t, d, this.budgets, this.alertsTo);
  }

  placement(t: TargetRow, h: { hop: number; continuation: boolean }, stored?: number | null) {
    return replyPlacement(t, h, stored, this.budgets, this.alertsTo);
  }
}
