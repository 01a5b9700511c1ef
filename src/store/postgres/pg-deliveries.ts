/**
 * Deliveries on PostgreSQL: the rules of rules/deliveries.ts (bounded queues with
 * priority-aware eviction, strict order per channel, leases, retries with backoff, dead letters
 * that count towards alerts), run inside a transaction that holds the lock of every agents row
 * whose deliveries it changes, so the depths it keeps in that row stay exact across replicas.
 */
import { hostname } from 'node:os';
import { ADAPTER_KIND_PREFIX } from '../../protocol/envelope.js';
import { type DeliveryRow, DeliveryRules, type DeliverySettings } from '../rules/deliveries.js';
import type { Holding } from '../rules/queue-shares.js';
import {
  type DeadLetterReason,
  DeliveryState,
  type DeliveryStats,
  type OpResults,
} from '../store.js';
import type { ReadyRow, Tx } from './pg-tx.js';

export type { DeliveryRow } from '../rules/deliveries.js';
export type { ReadyRow } from './pg-tx.js';

type MutableHolding = { -readonly [K in keyof Holding]: Holding[K] };

/** The adapter that leased a delivery, as its journey names it: the pod's name in Kubernetes. */
const REPLICA = hostname();

interface TxShares {
  /** Per recipient, each sender's part of its open deliveries (queue-shares.ts Holding). */
  readonly holdings: Map<string, Map<string, MutableHolding>>;
  /** Per recipient and sender (`recipient\0sender`), its oldest normal pending, in order. */
  readonly victims: Map<string, DeliveryRow[]>;
}

export class PgDeliveries {
  readonly #rules: DeliveryRules;
  readonly #stats: DeliveryStats;
  /** Per transaction: the holdings and victims read in it (#state). */
  readonly #shares = new WeakMap<Tx, TxShares>();

  constructor(cfg: DeliverySettings, stats: DeliveryStats) {
    this.#rules = new DeliveryRules(cfg);
    this.#stats = stats;
  }

  get leaseMs(): number {
    return this.#rules.leaseMs;
  }

  /**
   * What a new delivery from `sender` to `recipient` is to be (the recipient's row locked):
   * pending, after evicting the oldest normal pending delivery of the sender holding the most of
   * the queue if it is full, or dead at once (queue_full; then `settle` writes its dead letter).
   * The rules: rules/queue-shares.ts admission and fullQueue. `sender` undefined: an
   * operator's replay of a dead letter.
   */
  async admit(
    tx: Tx,
    recipient: string,
    messageId: string,
    priority: number,
    now: number,
    sender: string | undefined,
    quiet: boolean,
  ): Promise<DeliveryState> {
    const row = tx.agent(recipient);
    const depth = { all: row.depth, critical: row.critical };
    const left = tx.toCome.get(recipient) ?? 1;
    tx.toCome.set(recipient, left - 1);
    const needs = this.#rules.needsHoldings(depth, priority, sender);
    const holdings = needs ? await this.#holdings(tx, recipient) : undefined;
    const plan = this.#rules.admission(depth, priority, sender, [...(holdings?.values() ?? [])]);
    if (plan === 'refuse') return DeliveryState.deadLetter;
    if (plan !== 'admit') {
      const from = plan.evictFrom;
      const victim = from === undefined ? undefined : await this.#victim(tx, recipient, from, left);
      const full = this.#rules.fullQueue(victim !== undefined, priority, quiet);
      if (full === 'refuse') return DeliveryState.deadLetter;
      if (full === 'overrun') tx.raise(recipient, 'critical_overrun', messageId, 0, now);
      if (full === 'evict') {
        this.deadLetter(tx, victim!, 'evicted', now);
        const h = holdings!.get(from!)!;
        h.open--;
        h.evictable--;
      }
    }
    // the new copy, counted in the holdings read in this transaction
    const held = this.#state(tx).holdings.get(recipient);
    if (held !== undefined) {
      const key = sender ?? '';
      const h = held.get(key) ?? { sender: key, open: 0, critical: 0, evictable: 0 };
      h.open++;
      h.critical += priority;
      if (priority === 0) h.evictable++;
      held.set(key, h);
    }
    return DeliveryState.pending;
  }

  /** This transaction's holdings and victims (kept per transaction, dropped by #drop). */
  #state(tx: Tx): TxShares {
    let st = this.#shares.get(tx);
    if (st === undefined) {
      st = { holdings: new Map(), victims: new Map() };
      this.#shares.set(tx, st);
    }
    return st;
  }

  /**
   * Each sender's part of a recipient's open deliveries, read once a transaction and then kept
   * in step by admit (a new copy, an eviction) until an op that changes the queue otherwise
   * (lease, ack, nack, quarantine) drops it.
   */
  async #holdings(tx: Tx, recipient: string): Promise<Map<string, MutableHolding>> {
    const st = this.#state(tx);
    let held = st.holdings.get(recipient);
    if (held === undefined) {
      const rows = await tx.q<MutableHolding>('queueHoldings', [recipient]);
      held = new Map(rows.map((r) => [r.sender, { ...r }]));
      st.holdings.set(recipient, held);
    }
    return held;
  }

  /**
   * The oldest normal pending delivery of a recipient from `sender` (its row locked), to evict.
   * Read for the `left` deliveries the group may still add to it at once (up to 64); when they
   * are used up, read again, behind every write sent before (this group's own deliveries are
   * then candidates too). The ones read stay the oldest: the group adds only newer ones, and an
   * op that changes the queue otherwise (lease, ack, nack, quarantine) drops them.
   */
  async #victim(
    tx: Tx,
    recipient: string,
    sender: string,
    left: number,
  ): Promise<DeliveryRow | undefined> {
    const victims = this.#state(tx).victims;
    const key = `${recipient}\u0000${sender}`;
    let list = victims.get(key);
    if (list === undefined || list.length === 0) {
      const n = Math.min(Math.max(left, 1), 64);
      list = await tx.q<DeliveryRow>('oldestNormalPendingOf', [recipient, sender, n]);
      victims.set(key, list);
    }
    return list.shift();
  }

  /** An op changed `agent`'s queue otherwise than admit does (undefined: any agent's). */
  #drop(tx: Tx, agent?: string): void {
    const st = this.#shares.get(tx);
    if (st === undefined) return;
    if (agent === undefined) {
      st.holdings.clear();
      st.victims.clear();
      return;
    }
    st.holdings.delete(agent);
    for (const key of st.victims.keys()) {
      if (key.startsWith(`${agent}\u0000`)) st.victims.delete(key);
    }
  }

  /**
   * A delivery admitted and inserted: counted, or, dead at once, its dead letter (which the
   * statement that inserted it wrote: insertMessages, insertDelivery) counted and alerted.
   */
  settle(
    tx: Tx,
    d: { recipient: string; priority: number; kind: string; messageId: string },
    state: DeliveryState,
    now: number,
  ): void {
    if (state === DeliveryState.deadLetter) {
      this.#counted(tx, d.recipient, 'queue_full', d.kind, d.messageId, 0, now);
      return;
    }
    tx.bump(d.recipient, 1, d.priority);
    tx.fx.woken.add(d.recipient);
    this.#stats.enqueued++;
  }

  /**
   * Up to `max` deliveries of an agent that may be handed out now, in hand-out order, with
   * their messages: each ready lane (critical lanes first, then by head) served from its head
   * up to the first delivery that is leased or waiting for its retry (sqlite/sqlite-deliveries.ts
   * ready). `prefetched`: these rows, read in the group's first round trip.
   */
  async ready(
    tx: Tx,
    agent: string,
    max: number,
    now: number,
    prefetched?: ReadyRow[],
  ): Promise<ReadyRow[]> {
    if (max <= 0) return [];
    return prefetched ?? (await tx.q<ReadyRow>('readyLanes', [agent, now, max]));
  }

  /**
   * Leases these deliveries (read under their agent's lock) until now + leaseMs, their journey's
   * `leased` written by the same statement; attempts.
   */
  lease(tx: Tx, rows: readonly { id: number; attempt: number }[], now: number): number[] {
    if (rows.length === 0) return [];
    const expires = now + this.#rules.leaseMs;
    const ids = rows.map((r) => r.id);
    const detail = { lease_expires_at: new Date(expires).toISOString(), replica: REPLICA };
    tx.write('lease', [expires, ids, now, JSON.stringify(detail)]);
    this.#drop(tx);
    tx.fx.timingChanged = true;
    return rows.map((r) => {
      const attempt = r.attempt + 1;
      tx.changed(r.id, { state: DeliveryState.leased, attempt, lease_expires_at: expires });
      this.#stats.handedOut++;
      if (attempt > 1) this.#stats.redelivered++;
      return attempt;
    });
  }

  /**
   * Acks (the rule: rules/deliveries.ts sortAcks), written in one statement with their
   * journey's `acked` at `now`.
   */
  async ack(tx: Tx, agent: string, ids: readonly number[], now: number): Promise<OpResults['ack']> {
    this.#drop(tx, agent);
    const { answer, toAck } = this.#rules.sortAcks(ids, await this.#own(tx, agent, ids));
    for (const r of toAck) {
      tx.bump(agent, -1, -r.priority);
      this.#stats.acked++;
    }
    if (toAck.length > 0) tx.write('ackAll', [toAck.map((r) => r.id), now]);
    for (const r of toAck) tx.changed(r.id, { state: DeliveryState.acked, lease_expires_at: null });
    return answer;
  }

  /** Nacks (the rule: rules/deliveries.ts sortNacks); the retries written in one statement. */
  async nack(
    tx: Tx,
    agent: string,
    ids: readonly number[],
    now: number,
    retry = true,
    reason: string | null = null,
  ): Promise<OpResults['nack']> {
    this.#drop(tx, agent);
    const { answer, toNack } = this.#rules.sortNacks(ids, await this.#own(tx, agent, ids));
    const retries: [number, number][] = [];
    for (const r of toNack) {
      tx.journeyEvent(r, 'nacked', now, { retry, reason });
      if (retry) this.failAttempt(tx, r, 'nacked', now, retries);
      else this.deadLetter(tx, r, 'rejected', now, reason);
    }
    this.retryLater(tx, retries);
    return answer;
  }

  async extend(
    tx: Tx,
    agent: string,
    ids: readonly number[],
    extendMs: number,
    now: number,
  ): Promise<OpResults['extend']> {
    const rows = await this.#own(tx, agent, ids);
    const { expires, answer } = this.#rules.extension(agent, ids, rows, extendMs, now);
    // with their journey's `lease_extended`: one per delivery, an id given twice extended once
    const detail = JSON.stringify({ lease_expires_at: new Date(expires).toISOString() });
    if (ids.length > 0) tx.write('extendLeases', [expires, ids, now, detail]);
    for (const id of ids) tx.changed(id, { lease_expires_at: expires });
    tx.fx.timingChanged = true;
    return answer;
  }

  /** Expired leases (read under their agents' locks): failed attempts, retried in one statement. */
  expire(tx: Tx, rows: readonly DeliveryRow[], now: number): void {
    const retries: [number, number][] = [];
    for (const r of rows) {
      tx.journeyEvent(r, 'lease_expired', now);
      this.failAttempt(tx, r, 'lease_expired', now, retries);
    }
    this.retryLater(tx, retries);
  }

  /**
   * Pending copies past their deadline (read under their agents' locks): dead letters
   * `expired`, which releases their lanes; their agents' polls wake.
   */
  expirePending(tx: Tx, rows: readonly DeliveryRow[], now: number): void {
    for (const r of rows) {
      this.deadLetter(tx, r, 'expired', now);
      tx.fx.woken.add(r.recipient);
    }
  }

  /** A delivery whose message failed its checksum: to the dead letters (`integrity`). */
  async quarantine(tx: Tx, id: number, now: number): Promise<void> {
    const [r] = await tx.deliveries([id]);
    this.#drop(tx);
    if (r !== undefined && r.state !== DeliveryState.deadLetter)
      this.deadLetter(tx, r, 'integrity', now);
  }

  /**
   * A failed attempt: dead-lettered after the last, or `expired` past its deadline (never
   * handed over again, so not retried), else ready again after its backoff (added to
   * `retries`, written by retryLater in one statement).
   */
  failAttempt(
    tx: Tx,
    r: DeliveryRow,
    reason: 'lease_expired' | 'nacked',
    now: number,
    retries: [number, number][],
  ): void {
    if (r.expires_at != null && r.expires_at <= now) {
      this.deadLetter(tx, r, 'expired', now);
      tx.fx.woken.add(r.recipient);
      return;
    }
    const at = this.#rules.retryAt(r.attempt, now);
    if (at === 'dead') {
      this.deadLetter(tx, r, reason, now);
      return;
    }
    retries.push([r.id, at]);
    tx.fx.timingChanged = true;
  }

  retryLater(tx: Tx, retries: readonly [number, number][]): void {
    if (retries.length === 0) return;
    tx.write('retryLater', [retries.map((r) => r[0]), retries.map((r) => r[1])]);
    for (const [id] of retries) {
      tx.changed(id, { state: DeliveryState.pending, lease_expires_at: null });
    }
  }

  /** A dead letter: written (not waited for), counted, and alerted unless an alert's. */
  deadLetter(
    tx: Tx,
    r: DeliveryRow,
    reason: DeadLetterReason,
    now: number,
    note: string | null = null,
  ): void {
    const open = r.state !== DeliveryState.deadLetter;
    tx.write('deadLetter', [r.id, r.message, r.recipient, reason, r.attempt, now, note, open]);
    tx.journeyEvent(r, reason === 'evicted' ? 'evicted' : 'dead_lettered', now, { reason, note });
    if (open) {
      tx.bump(r.recipient, -1, -r.priority);
      tx.changed(r.id, { state: DeliveryState.deadLetter, lease_expires_at: null });
    }
    this.#counted(tx, r.recipient, reason, r.kind ?? null, r.message_id ?? null, r.attempt, now);
  }

  #counted(
    tx: Tx,
    recipient: string,
    reason: DeadLetterReason,
    kind: string | null,
    messageId: string | null,
    attempt: number,
    now: number,
  ): void {
    this.#stats.deadLetters[reason]++;
    if (messageId !== null) tx.fx.deadLettered.push({ messageId, recipient, reason, attempt });
    // An alert that dead-letters raises no alert of its own: that way lies a loop. (kind null:
    // the message is gone, as the dead letter's own read of it would find.)
    if (kind !== null && messageId !== null && !kind.startsWith(ADAPTER_KIND_PREFIX)) {
      tx.raise(recipient, reason, messageId, attempt, now);
    }
  }

  /** The agent's own deliveries of these ids (rules/deliveries.ts ownRows), read at once. */
  async #own(tx: Tx, agent: string, ids: readonly number[]): Promise<(DeliveryRow | undefined)[]> {
    if (ids.length === 0) return [];
    const found = await tx.deliveries(ids);
    return this.#rules.own(agent, ids, (_, i) => found[i]);
  }
}
