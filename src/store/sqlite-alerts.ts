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
import { type AlertRow, type DueAlert, dueAlertOf, MAX_IDS } from './alert-rows.js';
import type { CommitEffectsLog } from './commit-effects.js';
import { SQL } from './sql.js';
import { ALERT_KIND, type AlertReason, type DeliveryStats } from './store.js';

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
    const prior = this.#s.state.get(recipient, reason);
    const ids = prior === undefined ? [] : (JSON.parse(prior.message_ids) as string[]);
    // each id once: budget refusals of replies to one message name it once
    if (
      messageId !== undefined &&
      messageId !== '' &&
      ids.length < MAX_IDS &&
      !ids.includes(messageId)
    )
      ids.push(messageId);
    const row: AlertRow = {
      recipient,
      reason,
      kind: ALERT_KIND[reason],
      last_sent_at: prior?.last_sent_at ?? 0,
      count: (prior?.count ?? 0) + count,
      message_ids: JSON.stringify(ids),
      attempts,
      sender: sender ?? prior?.sender ?? null,
    };
    if (now - row.last_sent_at >= this.#windowMs) this.#fallDue(row, now);
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
