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
import type { DeliveryStats } from '../store.js';
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
  raise(...event: Parameters<typeof alertEvent>): void {
    const e = alertEvent(...event);
    const { row, due } = foldAlert(this.#s.state.get(e.recipient, e.reason), e, this.#windowMs);
    this.#keep(row, due ? e.at : undefined);
  }

  /** Alerts whose window has passed with a count waiting fall due. */
  flushDue(now: number): void {
    for (const a of this.#s.due.all(now - this.#windowMs)) this.#keep(a, now);
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

  /** A row as it now stands; with `dueAt`, its alert falls due then and the row starts again. */
  #keep(a: AlertRow, dueAt?: number): void {
    let row = a;
    if (dueAt !== undefined) {
      const { due, cleared } = dueAlertOf(a, dueAt);
      this.#due.push(due);
      this.#stats.alerts++;
      row = cleared;
    }
    this.#fx.timingChanged = true;
    const { recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender } = row;
    this.#s.upsert.run(recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender);
  }
}
