/**
 * Deliveries: the per-recipient half of the store. Bounded queues with priority-aware eviction,
 * leases, retries with backoff, dead letters, and the aggregated alerts they raise. Every
 * method runs inside the caller's transaction (the group commit), so a delivery and its
 * dead letter or alert are written together or not at all.
 */
import type Database from 'better-sqlite3';
import { GatewayError } from '../protocol/errors.js';
import { SQL } from './sql.js';

export interface DeliveryConfig {
  /** Pending plus leased deliveries one agent may hold. Default 500. */
  readonly capacity: number;
  /** How long a handed-out delivery waits for its ack, ms. Default 30,000. */
  readonly leaseMs: number;
  /** Redeliveries after the first, then dead-letter. Default 3. */
  readonly maxRetries: number;
  /** Backoff base, ms: attempt n waits base × 2^(n−1), ×0.75–1.25 jitter. Default 1,000. */
  readonly retryBaseMs: number;
  /** The agent alerts go to. */
  readonly alertsTo: string;
  /** At most one alert per (recipient, reason) in this window, ms. Default 30,000. */
  readonly alertWindowMs?: number;
  /** For jitter; tests pass a fixed one. */
  readonly random?: () => number;
}

export type DeadLetterReason = 'lease_expired' | 'nacked' | 'evicted' | 'queue_full';
export type AlertReason = DeadLetterReason | 'critical_overrun' | 'checksum_mismatch';

/** Counters the metrics read; incremented as things happen inside transactions. */
export interface DeliveryStats {
  enqueued: number;
  handedOut: number;
  redelivered: number;
  acked: number;
  deadLetters: Record<DeadLetterReason, number>;
  alerts: number;
}

interface Row {
  id: number;
  message: number;
  recipient: string;
  state: number;
  attempt: number;
  priority: number;
}

interface AlertRow {
  recipient: string;
  reason: string;
  kind: string;
  last_sent_at: number;
  count: number;
  message_ids: string;
  attempts: number;
}

/** Writes one alert message to @alertsTo; provided by the store (it owns sequences). */
export interface SentAlert {
  readonly kind: string;
  readonly payload: {
    reason: string;
    recipient: string;
    count: number;
    message_ids: string[];
    attempts: number;
  };
}

export type AlertSender = (
  kind: string,
  payload: {
    reason: string;
    recipient: string;
    count: number;
    message_ids: string[];
    attempts: number;
  },
  now: number,
) => void;

const ALERT_KIND: Record<AlertReason, string> = {
  lease_expired: 'alert/dead-letter',
  nacked: 'alert/dead-letter',
  evicted: 'alert/dead-letter',
  queue_full: 'alert/dead-letter',
  critical_overrun: 'alert/overrun',
  checksum_mismatch: 'alert/integrity',
};

export class Deliveries {
  readonly stats: DeliveryStats = {
    enqueued: 0,
    handedOut: 0,
    redelivered: 0,
    acked: 0,
    deadLetters: { lease_expired: 0, nacked: 0, evicted: 0, queue_full: 0 },
    alerts: 0,
  };
  readonly #cfg: Required<DeliveryConfig>;
  readonly #sendAlert: AlertSender;
  /** Pending + leased per agent, and how many of them are critical; kept with the rows. */
  #depth = new Map<string, { all: number; critical: number }>();
  /** Agents that were given new deliveries since takeTouched(): their long polls wake. */
  #touched = new Set<string>();
  /** Alerts written since takeAlerts(): the adapter also raises them on journald, once committed. */
  #sent: SentAlert[] = [];
  #timingChanged = false;
  readonly #s;

  constructor(db: Database.Database, cfg: DeliveryConfig, sendAlert: AlertSender) {
    this.#cfg = { alertWindowMs: 30_000, random: Math.random, ...cfg };
    this.#sendAlert = sendAlert;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      insert: p<{ id: number }>(SQL.insertDelivery),
      depths: p<{ recipient: string; depth: number; critical: number }>(SQL.queueDepths),
      oldestNormal: p<Row>(SQL.oldestNormalPending),
      ready: p<{ id: number; message: number }>(SQL.ready),
      lease: p<{ attempt: number }>(SQL.lease),
      delivery: p<Row>(SQL.delivery),
      setState: p(SQL.setState),
      retryLater: p(SQL.retryLater),
      expired: p<Row>(SQL.expiredLeases),
      nextLease: p<number | null>(SQL.nextLeaseExpiry).pluck(),
      nextAvailable: p<number | null>(SQL.nextAvailable).pluck(),
      kind: p<{ kind: string; message_id: string }>(SQL.messageKind),
      insertDead: p(SQL.insertDeadLetter),
      alertState: p<AlertRow>(SQL.alertState),
      upsertAlert: p(SQL.upsertAlert),
      dueAlerts: p<AlertRow>(SQL.dueAlerts),
      nextAlert: p<number | null>(SQL.nextAlertDue).pluck(),
    };
    this.reloadDepths();
  }

  /** After a rolled-back transaction: re-read the depths, forget alerts that never committed. */
  reloadDepths(): void {
    this.#sent = [];
    this.#depth = new Map(
      this.#s.depths.all().map((r) => [r.recipient, { all: r.depth, critical: r.critical }]),
    );
  }

  depth(agent: string): { all: number; critical: number } {
    return this.#depth.get(agent) ?? { all: 0, critical: 0 };
  }

  takeAlerts(): SentAlert[] {
    return this.#sent.splice(0);
  }

  /**
   * Whether something may now fall due sooner than before (a lease, a retry's backoff, an
   * alert window) since the last call: only then does the delivery timer need re-arming, so a
   * plain append costs no timer queries.
   */
  takeTimingChanged(): boolean {
    const changed = this.#timingChanged;
    this.#timingChanged = false;
    return changed;
  }

  takeTouched(): Set<string> {
    const t = this.#touched;
    this.#touched = new Set();
    return t;
  }

  /**
   * A new delivery of `message` to `recipient`, within the bound: past it, the oldest normal
   * pending delivery is evicted to the dead letters; if there is none, a normal delivery is
   * dead-lettered at once (queue_full) and a critical one is taken above the bound with an
   * overrun alert. Nothing leaves without a dead-letter row.
   */
  enqueue(
    message: number,
    messageId: string,
    recipient: string,
    priority: number,
    now: number,
    quiet = false,
  ): number {
    const d = this.#bump(recipient, 0, 0);
    if (d.all >= this.#cfg.capacity) {
      const victim = this.#s.oldestNormal.get(recipient);
      if (victim !== undefined) {
        this.#deadLetter(victim, 'evicted', now);
      } else if (priority === 0) {
        const { id } = this.#s.insert.get(message, recipient, priority, 3, now)!;
        this.#deadLetter(
          { id, message, recipient, state: 3, attempt: 0, priority },
          'queue_full',
          now,
        );
        return id;
      } else if (!quiet) {
        // (quiet: the adapter's own alerts overrunning alerts_to's queue raise no alert of
        // their own, or one overrun would feed the next)
        this.#alert(recipient, 'critical_overrun', messageId, 0, now);
      }
    }
    const { id } = this.#s.insert.get(message, recipient, priority, 0, now)!;
    this.#bump(recipient, 1, priority);
    this.#touched.add(recipient);
    this.stats.enqueued++;
    return id;
  }

  /** Up to `max` ready deliveries of an agent, in hand-out order (see SQL.ready). */
  ready(agent: string, max: number, now: number): { id: number; message: number }[] {
    return this.#s.ready.all(agent, now, max);
  }

  /** Leases these deliveries until now + leaseMs; returns each one's attempt number. */
  lease(ids: readonly number[], now: number): number[] {
    const expires = now + this.#cfg.leaseMs;
    return ids.map((id) => {
      const { attempt } = this.#s.lease.get(expires, id)!;
      this.#timingChanged = true;
      this.stats.handedOut++;
      if (attempt > 1) this.stats.redelivered++;
      return attempt;
    });
  }

  get leaseMs(): number {
    return this.#cfg.leaseMs;
  }

  /**
   * Acks: done with these. An ack after the lease expired is still taken while the delivery
   * waits for its retry (the work was done; the retry would only repeat it). Another agent's
   * delivery is a 403 for the whole request, checked before anything is written.
   */
  ack(
    agent: string,
    ids: readonly number[],
  ): { acked: number[]; unknown: number[]; dead: number[] } {
    const rows = this.#own(agent, ids);
    const out = { acked: [] as number[], unknown: [] as number[], dead: [] as number[] };
    ids.forEach((id, i) => {
      const r = rows[i];
      if (r === undefined) out.unknown.push(id);
      else if (r.state === 3) out.dead.push(id);
      else {
        if (r.state !== 2) {
          this.#s.setState.run(2, id);
          this.#bump(agent, -1, -r.priority);
          this.stats.acked++;
        }
        out.acked.push(id);
      }
    });
    return out;
  }

  /** Nacks: a failed attempt now, retried after its backoff or dead-lettered. */
  nack(
    agent: string,
    ids: readonly number[],
    now: number,
  ): { nacked: number[]; ignored: number[]; unknown: number[] } {
    const rows = this.#own(agent, ids);
    const out = { nacked: [] as number[], ignored: [] as number[], unknown: [] as number[] };
    ids.forEach((id, i) => {
      const r = rows[i];
      if (r === undefined) out.unknown.push(id);
      else if (r.state !== 1) out.ignored.push(id);
      else {
        this.#failAttempt(r, 'nacked', now);
        out.nacked.push(id);
      }
    });
    return out;
  }

  /** Expired leases become failed attempts; alerts whose window has passed go out. */
  sweep(now: number): void {
    for (;;) {
      const expired = this.#s.expired.all(now, 500);
      for (const r of expired) this.#failAttempt(r, 'lease_expired', now);
      if (expired.length < 500) break;
    }
    for (const a of this.#s.dueAlerts.all(now - this.#cfg.alertWindowMs)) this.#flushAlert(a, now);
  }

  /** The next moment something becomes due: a lease expires, a retry is ready, an alert. */
  nextDue(now: number): number | undefined {
    const alert = this.#s.nextAlert.get();
    const times = [
      this.#s.nextLease.get(),
      this.#s.nextAvailable.get(now),
      alert === null || alert === undefined ? null : alert + this.#cfg.alertWindowMs,
    ].filter((t): t is number => typeof t === 'number');
    return times.length === 0 ? undefined : Math.min(...times);
  }

  /** A fresh delivery of a dead letter's message, attempts reset. */
  replay(
    message: number,
    messageId: string,
    recipient: string,
    priority: number,
    now: number,
  ): number {
    return this.enqueue(message, messageId, recipient, priority, now);
  }

  /** Raises (or counts towards) an aggregated alert. */
  alert(
    recipient: string,
    reason: AlertReason,
    messageId: string,
    attempts: number,
    now: number,
  ): void {
    this.#alert(recipient, reason, messageId, attempts, now);
  }

  #own(agent: string, ids: readonly number[]): (Row | undefined)[] {
    const rows = ids.map((id) => this.#s.delivery.get(id));
    const foreign = rows.find((r) => r !== undefined && r.recipient !== agent);
    if (foreign !== undefined) {
      throw new GatewayError('not_your_delivery', `delivery ${foreign.id} is not ${agent}'s`, {
        field: 'delivery_ids',
      });
    }
    return rows;
  }

  #failAttempt(r: Row, reason: 'lease_expired' | 'nacked', now: number): void {
    if (r.attempt >= 1 + this.#cfg.maxRetries) {
      this.#deadLetter(r, reason, now);
      return;
    }
    // base × 2^(attempt−1) with ±25% jitter: ~1 s, 2 s, 4 s at the defaults
    const jitter = 0.75 + 0.5 * this.#cfg.random();
    const wait = Math.round(this.#cfg.retryBaseMs * 2 ** (r.attempt - 1) * jitter);
    this.#s.retryLater.run(now + wait, r.id);
    this.#timingChanged = true;
  }

  #deadLetter(r: Row, reason: DeadLetterReason, now: number): void {
    if (r.state !== 3) {
      this.#s.setState.run(3, r.id);
      this.#bump(r.recipient, -1, -r.priority);
    }
    this.#s.insertDead.run(r.id, r.message, r.recipient, reason, r.attempt, now);
    this.stats.deadLetters[reason]++;
    const m = this.#s.kind.get(r.message);
    // An alert that dead-letters raises no alert of its own: that way lies a loop.
    if (m !== undefined && !m.kind.startsWith('alert/')) {
      this.#alert(r.recipient, reason, m.message_id, r.attempt, now);
    }
  }

  #alert(
    recipient: string,
    reason: AlertReason,
    messageId: string,
    attempts: number,
    now: number,
  ): void {
    const prior = this.#s.alertState.get(recipient, reason);
    const ids = prior === undefined ? [] : (JSON.parse(prior.message_ids) as string[]);
    if (ids.length < 20) ids.push(messageId);
    const row: AlertRow = {
      recipient,
      reason,
      kind: ALERT_KIND[reason],
      last_sent_at: prior?.last_sent_at ?? 0,
      count: (prior?.count ?? 0) + 1,
      message_ids: JSON.stringify(ids),
      attempts,
    };
    if (now - row.last_sent_at >= this.#cfg.alertWindowMs) this.#flushAlert(row, now);
    else this.#saveAlert(row);
  }

  #flushAlert(a: AlertRow, now: number): void {
    this.#saveAlert({ ...a, last_sent_at: now, count: 0, message_ids: '[]', attempts: 0 });
    this.#sendAlert(
      a.kind,
      {
        reason: a.reason,
        recipient: a.recipient,
        count: a.count,
        message_ids: JSON.parse(a.message_ids) as string[],
        attempts: a.attempts,
      },
      now,
    );
    this.stats.alerts++;
    this.#sent.push({
      kind: a.kind,
      payload: {
        reason: a.reason,
        recipient: a.recipient,
        count: a.count,
        message_ids: JSON.parse(a.message_ids) as string[],
        attempts: a.attempts,
      },
    });
  }

  #saveAlert(a: AlertRow): void {
    this.#timingChanged = true;
    this.#s.upsertAlert.run(
      a.recipient,
      a.reason,
      a.kind,
      a.last_sent_at,
      a.count,
      a.message_ids,
      a.attempts,
    );
  }

  #bump(agent: string, all: number, critical: number): { all: number; critical: number } {
    const d = this.#depth.get(agent) ?? { all: 0, critical: 0 };
    d.all += all;
    d.critical += critical;
    this.#depth.set(agent, d);
    return d;
  }
}
