/**
 * Alert aggregation: at most one alert per (subject, reason) every window (30 s), carrying
 * the count since the last, so that a storm of dead letters cannot itself flood alerts_to's
 * queue; the first of a window goes out at once. The subject is the recipient a delivery alert
 * is about, or the sender a budget alert is about (kept in the same `recipient` column). The
 * counts live in alert_state, so a crash loses none. An alert is a message like any other: this
 * class decides when one is due, and the store writes it (it owns sequences and fan-out). Runs
 * inside the caller's transaction.
 */

import type Database from 'better-sqlite3';
import {
  type AlertRow,
  alertEvent,
  type DueAlert,
  dueAlertOf,
  foldAlert,
} from '../rules/alert-rows.js';
import type { CommitEffectsLog } from '../rules/commit-effects.js';
import type { AlertReason, DeliveryStats } from '../store.js';
import { SQL } from './sql.js';

export class Alerts {
  readonly #windowMs: number;
  readonly #fx: CommitEffectsLog;
  readonly #stats: DeliveryStats;
  readonly #s;
  #due: DueAlert[] = [];

  constructor(db: Database.Database, windowMs: number, fx: CommitEffectsLog, stats: DeliveryStats) {
    this.#windowMs = windowMs;
    this.#fx = fx;
    this.#stats = stats;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      state: p<AlertRow>(SQL.alertState),
      upsert: p(SQL.upsertAlert),
      due: p<AlertRow>(SQL.dueAlerts),
      next: p<number | null>(SQL.nextAlertDue).pluck(),
    };
  }

  /**
   * Counts `count` events (default one) towards their (recipient, reason) alert, listing
   * `messageId` when there is one; due at once if the window passed. For a budget reason,
   * `recipient` is the sender refused and `sender` the thread (alert-rows.ts AlertRow).
   */
  raise(
    recipient: string,
    reason: AlertReason,
    messageId: string | undefined,
    attempts: number,
    now: number,
    count = 1,
    sender: string | null = null,
  ) {
    const e = alertEvent(recipient, reason, messageId, attempts, now, count, sender);
    const { row, due } = foldAlert(this.#s.state.get(recipient, reason), e, this.#windowMs);
    if (due) this.#fallDue(row, now);
    else this.#save(row);
  }

  /** Alerts whose window has passed with a count waiting fall due. */
  flushDue(now: number): void {
    for (const a of this.#s.due.all(now - this.#windowMs)) this.#fallDue(a, now);
  }

  /** When the next aggregated alert falls due, if one waits. */
  nextDue(): number | undefined {
    const last = this.#s.next.get();
    return last === null || last === undefined ? undefined : last + this.#windowMs;
  }

  /** The alerts due now, for the store to write as messages; each is taken once. */
  takeDue(): DueAlert[] {
    return this.#due.length === 0 ? [] : this.#due.splice(0);
  }

  /** After a rollback: nothing that was due was written. */
  forget(): void {
    this.#due = [];
  }

  #fallDue(a: AlertRow, now: number): void {
    const { due, cleared } = dueAlertOf(a, now);
    this.#save(cleared);
    this.#due.push(due);
    this.#stats.alerts++;
  }

  #save(a: AlertRow): void {
    this.#fx.timingChanged = true;
    this.#s.upsert.run(
      a.recipient,
      a.reason,
      a.kind,
      a.last_sent_at,
      a.count,
      a.message_ids,
      a.attempts,
      a.sender,
    );
  }
}
