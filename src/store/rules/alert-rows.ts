/**
 * An aggregated alert as both stores keep it (a row of alert_state) and the alert it becomes
 * when its window has passed: pure, shared by sqlite/sqlite-alerts.ts and postgres/pg-alerts.ts, so that the
 * two write the same alert messages.
 */
import { ALERT_KIND, type AlertReason, type BudgetReason, type SentAlert } from '../store.js';

/**
 * Message ids one alert lists (docs/design/delivery.md, "Alerts": up to 20); the count has them
 * all.
 */
export const MAX_IDS = 20;

/** One (subject, reason)'s count since its last alert: a row of alert_state. */
export interface AlertRow {
  recipient: string;
  reason: string;
  kind: string;
  last_sent_at: number;
  count: number;
  message_ids: string;
  attempts: number;
  /**
   * Budget alerts: the thread of the latest refusal counted. They are aggregated per sender
   * (per thread, any agent could make the adapter send one critical alert
   * per thread it opened), so the row's `recipient` is the sender refused; the column kept its
   * name from when rows were per thread and it named the sender (migrations 7 / 2 turned those
   * rows around).
   */
  sender: string | null;
}

/** An alert that fell due, to be written as a message at `at`. */
export type DueAlert = SentAlert & { readonly at: number };

/** The alert a row tells at `now`; the row starts counting again from zero (`cleared`). */
export function dueAlertOf(a: AlertRow, now: number): { due: DueAlert; cleared: AlertRow } {
  const cleared = { ...a, last_sent_at: now, count: 0, message_ids: '[]', attempts: 0 };
  const message_ids = JSON.parse(a.message_ids) as string[];
  const kind = a.kind as SentAlert['kind'];
  const due: DueAlert =
    kind === 'alert/budget'
      ? {
          kind,
          payload: {
            reason: a.reason as BudgetReason,
            thread_id: a.sender ?? '',
            sender: a.recipient,
            count: a.count,
            message_ids,
          },
          at: now,
        }
      : {
          kind,
          payload: {
            reason: a.reason,
            recipient: a.recipient,
            count: a.count,
            message_ids,
            attempts: a.attempts,
          },
          at: now,
        };
  return { due, cleared };
}

/** One event counted towards its (subject, reason) alert: a dead letter, a refusal, a find. */
export interface AlertEvent {
  readonly recipient: string;
  readonly reason: AlertReason;
  /** The message it is about (null: none), listed once among the alert's ids. */
  readonly messageId: string | null;
  readonly attempts: number;
  readonly at: number;
  readonly count: number;
  /** Budget alerts: the thread of the refusal (AlertRow sender). */
  readonly sender: string | null;
}

/** An event as raise() is given it: an empty or missing message id names none. */
export function alertEvent(
  recipient: string,
  reason: AlertReason,
  messageId: string | undefined,
  attempts: number,
  at: number,
  count = 1,
  sender: string | null = null,
): AlertEvent {
  const id = messageId === undefined || messageId === '' ? null : messageId;
  return { recipient, reason, messageId: id, attempts, at, count, sender };
}

/**
 * An event folded into its row (`prior`: the row as it stands, undefined: none yet): the count
 * grows, the message listed once (up to MAX_IDS), and the alert falls due at once when the
 * window since the last one has passed (`due`: the row is then `dueAlertOf`'s to clear).
 */
export function foldAlert(
  prior: AlertRow | undefined,
  e: AlertEvent,
  windowMs: number,
): { row: AlertRow; due: boolean } {
  const ids = prior === undefined ? [] : (JSON.parse(prior.message_ids) as string[]);
  // each id once: budget refusals of replies to one message name it once
  if (e.messageId !== null && ids.length < MAX_IDS && !ids.includes(e.messageId)) {
    ids.push(e.messageId);
  }
  const row: AlertRow = {
    recipient: e.recipient,
    reason: e.reason,
    kind: ALERT_KIND[e.reason],
    last_sent_at: prior?.last_sent_at ?? 0,
    count: (prior?.count ?? 0) + e.count,
    message_ids: JSON.stringify(ids),
    attempts: e.attempts,
    sender: e.sender ?? prior?.sender ?? null,
  };
  return { row, due: e.at - row.last_sent_at >= windowMs };
}

/** Whether a row's alert is due at `now`: a count waits and its window has passed. */
export function alertWaiting(r: AlertRow, now: number, windowMs: number): boolean {
  return r.count > 0 && r.last_sent_at <= now - windowMs;
}
