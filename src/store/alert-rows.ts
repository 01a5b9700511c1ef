/**
 * An aggregated alert as both stores keep it (a row of alert_state) and the alert it becomes
 * when its window has passed: pure, shared by sqlite-alerts.ts and pg-alerts.ts, so that the
 * two write the same alert messages.
 */
import type { BudgetReason, SentAlert } from './store.js';

/** Message ids one alert lists (CONTRACT.md: up to 20); the count has them all. */
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
