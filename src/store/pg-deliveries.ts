/**
 * Deliveries on PostgreSQL: the rules of sqlite-deliveries.ts (bounded queues with
 * priority-aware eviction, strict order per channel, leases, retries with backoff, dead letters
 * that count towards alerts), run inside a transaction that holds the lock of every agents row
 * whose deliveries it changes, so the depths it keeps in that row stay exact across replicas.
 */
import { ADAPTER_KIND_PREFIX } from '../protocol/envelope.js';
import { GatewayError } from '../protocol/errors.js';
import type { Tx } from './pg-tx.js';
import {
  type DeadLetterReason,
  type DeliveryConfig,
  DeliveryState,
  type DeliveryStats,
  type OpResults,
} from './store.js';

export interface DeliveryRow {
  id: number;
  message: number;
  recipient: string;
  state: DeliveryState;
  attempt: number;
  priority: number;
  lease_expires_at?: number | null;
}

interface LaneRow {
  channel: string;
  critical: boolean;
  head: number;
  id: number;
  message: number;
  state: DeliveryState;
  available_at: number;
}

export class PgDeliveries {
  readonly #cfg: Required<DeliveryConfig>;
  readonly #stats: DeliveryStats;

  constructor(cfg: Required<DeliveryConfig>, stats: DeliveryStats) {
    this.#cfg = cfg;
    this.#stats = stats;
  }

  get leaseMs(): number {
    return this.#cfg.leaseMs;
  }

  /**
   * What a new delivery to `recipient` is to be (the recipient's row locked): pending, after
   * evicting the oldest normal pending delivery if the queue is full, or dead at once
   * (queue_full; then `settle` writes its dead letter). The rules of sqlite-deliveries.ts
   * enqueue.
   */
  async admit(
    tx: Tx,
    recipient: string,
    messageId: string,
    priority: number,
    now: number,
    quiet: boolean,
  ): Promise<DeliveryState> {
    const depth = tx.agent(recipient);
    if (priority !== 0 && depth.critical >= this.#cfg.criticalCapacity) {
      return DeliveryState.deadLetter;
    }
    if (depth.depth >= this.#cfg.capacity) {
      const victim = await tx.one<DeliveryRow>('oldestNormalPending', [recipient]);
      if (victim !== undefined) {
        await this.deadLetter(tx, victim, 'evicted', now);
      } else if (priority === 0) {
        return DeliveryState.deadLetter;
      } else if (!quiet) {
        tx.raise(recipient, 'critical_overrun', messageId, 0, now);
      }
    }
    return DeliveryState.pending;
  }

  /** A delivery admitted and inserted: counted, or (dead at once) its dead letter written. */
  async settle(
    tx: Tx,
    d: { id: number; message: number; recipient: string; priority: number },
    state: DeliveryState,
    now: number,
  ): Promise<void> {
    if (state === DeliveryState.deadLetter) {
      const row = { ...d, state, attempt: 0 };
      await this.deadLetter(tx, row, 'queue_full', now);
      return;
    }
    tx.bump(d.recipient, 1, d.priority);
    tx.fx.woken.add(d.recipient);
    this.#stats.enqueued++;
  }

  /**
   * Up to `max` deliveries of an agent that may be handed out now, in hand-out order: each
   * ready lane (critical lanes first, then by head) served from its head up to the first
   * delivery that is leased or waiting for its retry (sqlite-deliveries.ts ready).
   */
  async ready(tx: Tx, agent: string, max: number, now: number) {
    const out: { id: number; message: number }[] = [];
    if (max <= 0) return out;
    const rows = await tx.q<LaneRow>('readyLanes', [agent, now, max]);
    let closed: string | undefined;
    for (const r of rows) {
      if (out.length >= max) break;
      if (r.channel === closed) continue;
      if (r.state !== DeliveryState.pending || r.available_at > now) {
        closed = r.channel;
        continue;
      }
      out.push({ id: r.id, message: r.message });
    }
    return out;
  }

  /** Leases these deliveries until now + leaseMs; each one's attempt number, in order. */
  async lease(tx: Tx, ids: readonly number[], now: number): Promise<number[]> {
    if (ids.length === 0) return [];
    const rows = await tx.q<{ id: number; attempt: number }>('lease', [
      now + this.#cfg.leaseMs,
      ids,
    ]);
    const attempts = new Map(rows.map((r) => [r.id, r.attempt]));
    tx.fx.timingChanged = true;
    return ids.map((id) => {
      const attempt = attempts.get(id)!;
      this.#stats.handedOut++;
      if (attempt > 1) this.#stats.redelivered++;
      return attempt;
    });
  }

  async ack(tx: Tx, agent: string, ids: readonly number[]): Promise<OpResults['ack']> {
    const out: OpResults['ack'] = { acked: [], dead: [], unknown: [] };
    const rows = await this.#own(tx, agent, ids);
    const toAck: number[] = [];
    rows.forEach((r, i) => {
      const id = ids[i]!;
      if (r === undefined) out.unknown.push(id);
      else if (r.state === DeliveryState.deadLetter) out.dead.push(id);
      else {
        if (r.state !== DeliveryState.acked && !toAck.includes(id)) {
          toAck.push(id);
          tx.bump(agent, -1, -r.priority);
          this.#stats.acked++;
        }
        out.acked.push(id);
      }
    });
    if (toAck.length > 0) await tx.q('ackAll', [toAck]);
    return out;
  }

  async nack(
    tx: Tx,
    agent: string,
    ids: readonly number[],
    now: number,
    retry = true,
    reason: string | null = null,
  ): Promise<OpResults['nack']> {
    const out: OpResults['nack'] = { nacked: [], ignored: [], unknown: [] };
    const rows = await this.#own(tx, agent, ids);
    const retries: [number, number][] = [];
    const done = new Set<number>();
    for (const [i, r] of rows.entries()) {
      const id = ids[i]!;
      if (r === undefined) out.unknown.push(id);
      else if (r.state !== DeliveryState.leased || done.has(id)) out.ignored.push(id);
      else {
        done.add(id);
        if (retry) await this.failAttempt(tx, r, 'nacked', now, retries);
        else await this.deadLetter(tx, r, 'rejected', now, reason);
        out.nacked.push(id);
      }
    }
    await this.retryLater(tx, retries);
    return out;
  }

  async extend(
    tx: Tx,
    agent: string,
    ids: readonly number[],
    extendMs: number,
    now: number,
  ): Promise<OpResults['extend']> {
    const rows = await this.#own(tx, agent, ids);
    const leased = (r: DeliveryRow | undefined) =>
      r?.state === DeliveryState.leased && (r.lease_expires_at ?? 0) > now;
    const gone = ids.find((_, i) => !leased(rows[i]));
    if (gone !== undefined) {
      throw new GatewayError('not_leased', `delivery ${gone} is not leased to ${agent} any more`, {
        field: 'delivery_ids',
      });
    }
    const expires = now + extendMs;
    if (ids.length > 0) await tx.q('extendLeases', [expires, ids]);
    tx.fx.timingChanged = true;
    const at = new Date(expires).toISOString();
    return ids.map((id) => ({ delivery_id: id, lease_expires_at: at }));
  }

  /** A delivery whose message failed its checksum: to the dead letters (`integrity`). */
  async quarantine(tx: Tx, id: number, now: number): Promise<void> {
    const r = await tx.one<DeliveryRow>('deliveries', [[id]]);
    if (r !== undefined && r.state !== DeliveryState.deadLetter)
      await this.deadLetter(tx, r, 'integrity', now);
  }

  /**
   * A failed attempt: dead-lettered after the last, else ready again after its backoff (added
   * to `retries`, written by retryLater in one statement).
   */
  async failAttempt(
    tx: Tx,
    r: DeliveryRow,
    reason: 'lease_expired' | 'nacked',
    now: number,
    retries: [number, number][],
  ): Promise<void> {
    if (r.attempt >= 1 + this.#cfg.maxRetries) {
      await this.deadLetter(tx, r, reason, now);
      return;
    }
    const jitter = 0.75 + 0.5 * this.#cfg.random();
    const wait = Math.round(this.#cfg.retryBaseMs * 2 ** (r.attempt - 1) * jitter);
    retries.push([r.id, now + wait]);
    tx.fx.timingChanged = true;
  }

  async retryLater(tx: Tx, retries: readonly [number, number][]): Promise<void> {
    if (retries.length === 0) return;
    await tx.q('retryLater', [retries.map((r) => r[0]), retries.map((r) => r[1])]);
  }

  async deadLetter(
    tx: Tx,
    r: DeliveryRow,
    reason: DeadLetterReason,
    now: number,
    note: string | null = null,
  ): Promise<void> {
    const open = r.state !== DeliveryState.deadLetter;
    const m = await tx.one<{ kind: string; message_id: string }>('deadLetter', [
      r.id,
      r.message,
      r.recipient,
      reason,
      r.attempt,
      now,
      note,
      open,
    ]);
    if (open) tx.bump(r.recipient, -1, -r.priority);
    this.#stats.deadLetters[reason]++;
    // An alert that dead-letters raises no alert of its own: that way lies a loop.
    if (m !== undefined && !m.kind.startsWith(ADAPTER_KIND_PREFIX)) {
      tx.raise(r.recipient, reason, m.message_id, r.attempt, now);
    }
  }

  async #own(tx: Tx, agent: string, ids: readonly number[]): Promise<(DeliveryRow | undefined)[]> {
    if (ids.length === 0) return [];
    const rows = await tx.q<DeliveryRow>('deliveries', [ids]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    const found = ids.map((id) => byId.get(id));
    const foreign = found.find((r) => r !== undefined && r.recipient !== agent);
    if (foreign !== undefined) {
      throw new GatewayError('not_your_delivery', `delivery ${foreign.id} is not ${agent}'s`, {
        field: 'delivery_ids',
      });
    }
    return found;
  }
}
