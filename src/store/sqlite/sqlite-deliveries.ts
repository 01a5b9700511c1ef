/**
 * Deliveries: the per-recipient half of the SQLite store. Bounded queues with priority-aware
 * eviction, leases, retries with backoff and dead letters, which count towards alerts. Every
 * method runs inside the caller's transaction (the group commit), so a delivery and its dead
 * letter or alert are written together or not at all.
 */
import { hostname } from 'node:os';
import type Database from 'better-sqlite3';
import { ADAPTER_KIND_PREFIX } from '../../protocol/envelope.js';
import type { CommitEffectsLog } from '../rules/commit-effects.js';
import { type DeliveryRow, DeliveryRules, type DeliverySettings } from '../rules/deliveries.js';
import type { Holding } from '../rules/queue-shares.js';
import {
  type DeadLetterReason,
  type DeliveryEvent,
  DeliveryState,
  type DeliveryStats,
  type OpResults,
  type RedriveDetail,
} from '../store.js';
import { SQL } from './sql.js';
import type { Alerts } from './sqlite-alerts.js';

type Row = DeliveryRow;

/** Expired leases handled per statement in a sweep. */
const SWEEP_CHUNK = 500;

/** The adapter that leased a delivery, as its journey names it: the pod's name in Kubernetes. */
const REPLICA = hostname();

/** What a new copy is made of (enqueue's arguments, for the rows it writes). */
interface NewCopy {
  readonly message: number;
  readonly recipient: string;
  readonly channel: string;
  readonly priority: number;
  readonly now: number;
  readonly redrivenFrom: RedriveDetail | undefined;
  readonly expiresAt: number | null;
}

export class Deliveries {
  readonly #rules: DeliveryRules;
  readonly #alerts: Alerts;
  readonly #fx: CommitEffectsLog;
  readonly #stats: DeliveryStats;
  /** Pending + leased per agent, and how many of them are critical; kept with the rows. */
  #depth = new Map<string, { all: number; critical: number }>();
  readonly #s;

  constructor(
    db: Database.Database,
    cfg: DeliverySettings,
    alerts: Alerts,
    fx: CommitEffectsLog,
    stats: DeliveryStats,
  ) {
    this.#rules = new DeliveryRules(cfg);
    this.#alerts = alerts;
    this.#fx = fx;
    this.#stats = stats;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      insert: p<{ id: number }>(SQL.insertDelivery),
      depths: p<{ recipient: string; depth: number; critical: number }>(SQL.queueDepths),
      oldestNormalOf: p<Row>(SQL.oldestNormalPendingOf),
      holdings: p<Holding>(SQL.queueHoldings),
      readyLanes: p<{ channel: string; head: number }>(SQL.readyLanes),
      lane: p<{
        id: number;
        message: number;
        state: DeliveryState;
        available_at: number;
        expires_at: number | null;
      }>(SQL.lane),
      lease: p<{ attempt: number; message: number; recipient: string }>(SQL.lease),
      delivery: p<Row>(SQL.delivery),
      setState: p(SQL.setState),
      retryLater: p(SQL.retryLater),
      expired: p<Row>(SQL.expiredLeases),
      expiredPending: p<Row>(SQL.expiredPending),
      nextExpiry: p<number | null>(SQL.nextExpiry).pluck(),
      nextLease: p<number | null>(SQL.nextLeaseExpiry).pluck(),
      nextAvailable: p<number | null>(SQL.nextAvailable).pluck(),
      kind: p<{ kind: string; message_id: string }>(SQL.messageKind),
      insertDead: p(SQL.insertDeadLetter),
      extend: p(SQL.extendLease),
      event: p(SQL.insertEvent),
    };
    this.reloadDepths();
  }

  /** Re-reads the depths from the rows: at open, and after a rolled-back transaction. */
  reloadDepths(): void {
    this.#depth = new Map(
      this.#s.depths.all().map((r) => [r.recipient, { all: r.depth, critical: r.critical }]),
    );
  }

  depth(agent: string): { all: number; critical: number } {
    return this.#depth.get(agent) ?? { all: 0, critical: 0 };
  }

  get leaseMs(): number {
    return this.#rules.leaseMs;
  }

  /**
   * A new delivery of `message` from `sender` to `recipient`, within the bounds (the rules are
   * queue-shares.ts's). A critical one past its sender's share of the critical bound, or past
   * the bound, is dead-lettered at once (queue_full). Past the bound of the queue, the oldest
   * normal pending delivery of the sender holding the most of it is evicted to the dead
   * letters; if no such sender has one, a normal delivery is dead-lettered at once (queue_full)
   * and a critical one is taken above the bound with an overrun alert. Nothing leaves without a
   * dead-letter row. `sender` undefined: an operator's replay of a dead letter, `redrivenFrom`
   * the dead letter's id and who replayed it (the `redriven` event's detail).
   */
  enqueue(
    message: number,
    messageId: string,
    recipient: string,
    channel: string,
    priority: number,
    now: number,
    sender: string | undefined,
    quiet = false,
    redrivenFrom?: RedriveDetail,
    expiresAt: number | null = null,
  ): number {
    const copy = { message, recipient, channel, priority, now, redrivenFrom, expiresAt };
    const depth = this.depth(recipient);
    const needs = this.#rules.needsHoldings(depth, priority, sender);
    const held = needs ? this.#holdings(recipient) : [];
    const plan = this.#rules.admission(depth, priority, sender, held);
    if (plan === 'refuse') return this.#refuse(copy);
    if (plan !== 'admit') {
      const from = plan.evictFrom;
      const victim = from === undefined ? undefined : this.#s.oldestNormalOf.get(recipient, from);
      const full = this.#rules.fullQueue(victim !== undefined, priority, quiet);
      if (full === 'refuse') return this.#refuse(copy);
      if (full === 'evict') this.#deadLetter(victim!, 'evicted', now);
      if (full === 'overrun') this.#alerts.raise(recipient, 'critical_overrun', messageId, 0, now);
    }
    const id = this.#insert(copy, DeliveryState.pending);
    this.#bump(recipient, 1, priority);
    this.#fx.woken.add(recipient);
    this.#stats.enqueued++;
    return id;
  }

  #holdings(recipient: string): Holding[] {
    return this.#s.holdings.all(recipient);
  }

  /**
   * Up to `max` deliveries of an agent that may be handed out now, in hand-out order. Strict
   * order per channel: a channel's open deliveries form a lane in sequence order, and a lane is
   * served from its head up to the first delivery that is leased or waiting for its retry, so
   * nothing overtakes an earlier message of its channel. Lanes holding a critical delivery go
   * first, then by their head (SQL.readyLanes).
   */
  ready(agent: string, max: number, now: number): { id: number; message: number }[] {
    const out: { id: number; message: number }[] = [];
    for (const lane of this.#s.readyLanes.all({ agent, now })) {
      if (out.length >= max) break;
      for (const d of this.#s.lane.all(agent, lane.channel, lane.head, max - out.length)) {
        if (d.state !== DeliveryState.pending || d.available_at > now) break;
        // past its deadline: the sweep armed for it dead-letters it and releases the lane
        if (d.expires_at !== null && d.expires_at <= now) break;
        out.push(d);
      }
    }
    return out;
  }

  /** Leases these deliveries until now + leaseMs; returns each one's attempt number. */
  lease(ids: readonly number[], now: number): number[] {
    const expires = now + this.#rules.leaseMs;
    const detail = JSON.stringify({
      lease_expires_at: new Date(expires).toISOString(),
      replica: REPLICA,
    });
    return ids.map((id) => {
      const { attempt, message, recipient } = this.#s.lease.get(expires, id)!;
      this.#s.event.run(message, id, recipient, now, 'leased', attempt, detail);
      this.#fx.timingChanged = true;
      this.#stats.handedOut++;
      if (attempt > 1) this.#stats.redelivered++;
      return attempt;
    });
  }

  /** Acks: done with these (the rule: rules/deliveries.ts sortAcks). */
  ack(agent: string, ids: readonly number[], now: number): OpResults['ack'] {
    const { answer, toAck } = this.#rules.sortAcks(ids, this.#own(agent, ids));
    for (const r of toAck) {
      this.#s.setState.run(DeliveryState.acked, r.id);
      this.#event(r, 'acked', now);
      this.#bump(agent, -1, -r.priority);
      this.#stats.acked++;
    }
    return answer;
  }

  /**
   * Nacks: a failed attempt now, retried after its backoff or dead-lettered. With `retry`
   * false the agent says it can never handle them: dead-lettered at once (`rejected`), its
   * reason kept as the dead letter's note (the rule: rules/deliveries.ts sortNacks).
   */
  nack(
    agent: string,
    ids: readonly number[],
    now: number,
    retry = true,
    reason: string | null = null,
  ): OpResults['nack'] {
    const { answer, toNack } = this.#rules.sortNacks(ids, this.#own(agent, ids));
    for (const r of toNack) {
      this.#event(r, 'nacked', now, { retry, reason });
      if (retry) this.#failAttempt(r, 'nacked', now);
      else this.#deadLetter(r, 'rejected', now, reason);
    }
    return answer;
  }

  /**
   * The agent is still working on these: each lease now ends `extendMs` from now. Checked
   * whole before anything is written: one not leased to the agent (acked, expired,
   * dead-lettered, unknown, another agent's) is 409 `not_leased`.
   */
  extend(
    agent: string,
    ids: readonly number[],
    extendMs: number,
    now: number,
  ): OpResults['extend'] {
    const own = this.#own(agent, ids);
    const { expires, answer } = this.#rules.extension(agent, ids, own, extendMs, now);
    const detail = { lease_expires_at: new Date(expires).toISOString() };
    const done = new Set<number>(); // an id repeated in one request is extended once
    for (const r of own as Row[]) {
      if (done.has(r.id)) continue;
      done.add(r.id);
      this.#s.extend.run(expires, r.id);
      this.#event(r, 'lease_extended', now, detail);
    }
    this.#fx.timingChanged = true;
    return answer;
  }

  /**
   * A delivery whose message failed its checksum: to the dead letters (`integrity`, with its
   * alert) instead of to its agent. Like every dead letter, it releases its channel.
   */
  quarantine(id: number, now: number): void {
    const r = this.#s.delivery.get(id);
    if (r !== undefined && r.state !== DeliveryState.deadLetter)
      this.#deadLetter(r, 'integrity', now);
  }

  /**
   * Expired leases become failed attempts (or dead letters `expired`, past their deadline);
   * pending copies past their deadline become dead letters `expired`, which releases their lanes:
   * their agents' polls wake.
   */
  sweep(now: number): void {
    for (;;) {
      const expired = this.#s.expired.all(now, SWEEP_CHUNK);
      for (const r of expired) {
        this.#event(r, 'lease_expired', now);
        this.#failAttempt(r, 'lease_expired', now);
      }
      if (expired.length < SWEEP_CHUNK) break;
    }
    for (;;) {
      const late = this.#s.expiredPending.all(now, SWEEP_CHUNK);
      for (const r of late) {
        this.#deadLetter(r, 'expired', now);
        this.#fx.woken.add(r.recipient);
      }
      if (late.length < SWEEP_CHUNK) break;
    }
  }

  /** The next lease expiry or retry, if any. */
  nextDue(now: number): number | undefined {
    const times = [
      this.#s.nextLease.get(),
      this.#s.nextAvailable.get(now),
      this.#s.nextExpiry.get(),
    ].filter((t): t is number => typeof t === 'number');
    return times.length === 0 ? undefined : Math.min(...times);
  }

  /** The agent's own deliveries of these ids (rules/deliveries.ts ownRows). */
  #own(agent: string, ids: readonly number[]): (Row | undefined)[] {
    return this.#rules.own(agent, ids, (id) => this.#s.delivery.get(id));
  }

  #failAttempt(r: Row, reason: 'lease_expired' | 'nacked', now: number): void {
    if (r.expires_at != null && r.expires_at <= now) {
      // past its deadline: never handed over again, so not retried
      this.#deadLetter(r, 'expired', now);
      this.#fx.woken.add(r.recipient);
      return;
    }
    const at = this.#rules.retryAt(r.attempt, now);
    if (at === 'dead') {
      this.#deadLetter(r, reason, now);
      return;
    }
    this.#s.retryLater.run(at, r.id);
    this.#fx.timingChanged = true;
  }

  /** A delivery dead-lettered as it is made (queue_full): its row, its dead letter, its alert. */
  #refuse(copy: NewCopy): number {
    const state = DeliveryState.deadLetter;
    const id = this.#insert(copy, state);
    const { message, recipient, priority, now } = copy;
    this.#deadLetter({ id, message, recipient, state, attempt: 0, priority }, 'queue_full', now);
    return id;
  }

  /** A new copy's row; a redriven one's journey goes on with it, `redriven` its first event. */
  #insert(c: NewCopy, state: DeliveryState): number {
    const { id } = this.#s.insert.get(
      c.message,
      c.recipient,
      c.channel,
      c.priority,
      state,
      c.now,
      c.expiresAt,
    )!;
    // a deadline is a moment the due timer must know of (docs/design/time.md)
    if (c.expiresAt !== null) this.#fx.timingChanged = true;
    if (c.redrivenFrom !== undefined) {
      const r = { id, message: c.message, recipient: c.recipient, attempt: 0 };
      this.#event(r, 'redriven', c.now, { ...c.redrivenFrom });
    }
    return id;
  }

  #deadLetter(r: Row, reason: DeadLetterReason, now: number, note: string | null = null): void {
    if (r.state !== DeliveryState.deadLetter) {
      this.#s.setState.run(DeliveryState.deadLetter, r.id);
      this.#bump(r.recipient, -1, -r.priority);
    }
    this.#s.insertDead.run(r.id, r.message, r.recipient, reason, r.attempt, now, note);
    this.#event(r, reason === 'evicted' ? 'evicted' : 'dead_lettered', now, { reason, note });
    this.#stats.deadLetters[reason]++;
    const m = this.#s.kind.get(r.message);
    if (m !== undefined) {
      this.#fx.deadLettered.push({
        messageId: m.message_id,
        recipient: r.recipient,
        reason,
        attempt: r.attempt,
      });
    }
    // An alert that dead-letters raises no alert of its own: that way lies a loop.
    if (m !== undefined && !m.kind.startsWith(ADAPTER_KIND_PREFIX)) {
      this.#alerts.raise(r.recipient, reason, m.message_id, r.attempt, now);
    }
  }

  /** One event of a delivery's journey, in the transaction of the change it records. */
  #event(
    r: Pick<Row, 'id' | 'message' | 'recipient' | 'attempt'>,
    event: DeliveryEvent,
    now: number,
    detail?: object,
  ): void {
    const json = detail === undefined ? null : JSON.stringify(detail);
    this.#s.event.run(r.message, r.id, r.recipient, now, event, r.attempt, json);
  }

  #bump(agent: string, all: number, critical: number): void {
    const d = this.#depth.get(agent) ?? { all: 0, critical: 0 };
    d.all += all;
    d.critical += critical;
    this.#depth.set(agent, d);
  }
}
