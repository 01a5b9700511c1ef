/**
 * Alert aggregation on PostgreSQL: the rules of rules/alert-rows.ts (at most one alert per
 * (subject, reason) every window, the first at once, the count since the last), applied by one
 * transaction at a time across replicas. Groups only append events (alert_events); the alerts
 * transaction, under pg_advisory_xact_lock(LOCK_ALERTS), takes every event in id order, folds
 * each into its alert_state row as SQLite's raise() would at the event's time, and hands back
 * the alerts that fell due for the store to write as messages. Runs inside that transaction.
 */
import {
  type AlertEvent,
  type AlertRow,
  alertWaiting,
  type DueAlert,
  dueAlertOf,
  foldAlert,
} from '../rules/alert-rows.js';
import type { DeliveryStats } from '../store.js';
import type { Tx } from './pg-tx.js';

const keyOf = (recipient: string, reason: string) => `${recipient}\u0000${reason}`;

export class AlertFold {
  readonly #windowMs: number;
  readonly #stats: DeliveryStats;
  readonly #tx: Tx;
  readonly #rows = new Map<string, AlertRow | null>();
  readonly #changed = new Set<string>();
  readonly #due: DueAlert[] = [];

  constructor(tx: Tx, windowMs: number, stats: DeliveryStats) {
    this.#tx = tx;
    this.#windowMs = windowMs;
    this.#stats = stats;
  }

  /** Reads the alert_state rows of these events that are not read yet, one statement. */
  async load(events: readonly AlertEvent[]): Promise<void> {
    const want = new Map<string, AlertEvent>();
    for (const e of events) {
      const k = keyOf(e.recipient, e.reason);
      if (!this.#rows.has(k)) want.set(k, e);
    }
    if (want.size === 0) return;
    const list = [...want.values()];
    const rows = await this.#tx.q<AlertRow>('alertStates', [
      list.map((e) => e.recipient),
      list.map((e) => e.reason),
    ]);
    for (const k of want.keys()) this.#rows.set(k, null);
    for (const r of rows) this.#rows.set(keyOf(r.recipient, r.reason), r);
  }

  /** One event, folded as the SQLite store folds it (rules/alert-rows.ts foldAlert). */
  apply(e: AlertEvent): void {
    const prior = this.#rows.get(keyOf(e.recipient, e.reason)) ?? undefined;
    const { row, due } = foldAlert(prior, e, this.#windowMs);
    if (due) this.#fallDue(row, e.at);
    else this.#save(row);
  }

  /** Alerts whose window has passed with a count waiting fall due at `now`. */
  async flushDue(now: number): Promise<void> {
    const rows = await this.#tx.q<AlertRow>('dueAlerts', [now - this.#windowMs]);
    const byKey = new Map(rows.map((r) => [keyOf(r.recipient, r.reason), r]));
    // what this transaction changed wins over what the table says
    for (const [k, r] of this.#rows) {
      if (r !== null && alertWaiting(r, now, this.#windowMs)) byKey.set(k, r);
      else byKey.delete(k);
    }
    for (const r of byKey.values()) this.#fallDue(r, now);
  }

  takeDue(): DueAlert[] {
    return this.#due.splice(0);
  }

  /** The changed rows, written back in one statement (sent with the COMMIT). */
  save(): void {
    if (this.#changed.size === 0) return;
    const rows = [...this.#changed].map((k) => this.#rows.get(k)!);
    this.#tx.write('saveAlerts', [
      rows.map((r) => r.recipient),
      rows.map((r) => r.reason),
      rows.map((r) => r.kind),
      rows.map((r) => r.last_sent_at),
      rows.map((r) => r.count),
      rows.map((r) => r.message_ids),
      rows.map((r) => r.attempts),
      rows.map((r) => r.sender),
    ]);
    this.#changed.clear();
  }

  #fallDue(a: AlertRow, now: number): void {
    const { due, cleared } = dueAlertOf(a, now);
    this.#save(cleared);
    this.#due.push(due);
    this.#stats.alerts++;
  }

  #save(a: AlertRow): void {
    const k = keyOf(a.recipient, a.reason);
    this.#rows.set(k, a);
    this.#changed.add(k);
    this.#tx.fx.timingChanged = true;
  }
}
