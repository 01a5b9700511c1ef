/**
 * An ask's reply on SQLite (the store's take_reply; docs/design/time.md, "Asking"): two index
 * probes find the first copy, held by the asker, of a message that answers the asked one, and
 * rules/replies.ts decides what becomes of it. Runs inside the caller's transaction (the group
 * commit), so the copy's lease and its journey's event are written together or not at all.
 */
import type Database from 'better-sqlite3';
import { uuidv7Time } from '../../protocol/ids.js';
import type { CommitEffectsLog } from '../rules/commit-effects.js';
import { notAsked, type ReplyRow, replyAnswer, replyStep } from '../rules/replies.js';
import type { BodyRow } from '../rules/stored-message.js';
import { type DeliveryJson, DeliveryState } from '../store.js';
import { SQL } from './sql.js';
import type { Deliveries } from './sqlite-deliveries.js';

/** What the store lends the replies: its pause and its checksum check of a message. */
export interface ReplyHooks {
  /** Whether an operator paused the agent's deliveries. */
  readonly paused: (agent: string) => boolean;
  /** Whether a stored message passes its checksum; `report`: a read to tell of (not a lease). */
  readonly intact: (row: BodyRow, report: boolean) => boolean;
}

export class Replies {
  readonly #deliveries: Deliveries;
  readonly #fx: CommitEffectsLog;
  readonly #hooks: ReplyHooks;
  readonly #s;

  constructor(
    db: Database.Database,
    deliveries: Deliveries,
    fx: CommitEffectsLog,
    hooks: ReplyHooks,
  ) {
    this.#deliveries = deliveries;
    this.#fx = fx;
    this.#hooks = hooks;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      messageSender: p<string>(SQL.messageSender).pluck(),
      scheduledSender: p<string>(SQL.scheduledSender).pluck(),
      replyCopy: p<ReplyRow>(SQL.replyCopy),
      extendLease: p(SQL.extendLease),
      event: p(SQL.insertEvent),
    };
  }

  /**
   * The reply to `messageId` held by `agent`, taken (rules/replies.ts replyStep): the delivery's
   * JSON with its state, or undefined while there is none to hand over. 404 `not_found` unless
   * `agent` sent `messageId`; a scheduled message of its own that has not fired is no error
   * (nothing can answer it yet).
   */
  take(agent: string, messageId: string, now: number): DeliveryJson | undefined {
    const at = uuidv7Time(messageId);
    const sender = at === undefined ? undefined : this.#s.messageSender.get(at, messageId);
    if (sender !== agent) {
      if (sender === undefined && this.#s.scheduledSender.get(messageId) === agent)
        return undefined;
      throw notAsked(agent, messageId);
    }
    const r = this.#s.replyCopy.get(messageId, agent);
    if (r === undefined) return undefined;
    const open = r.state === DeliveryState.pending || r.state === DeliveryState.leased;
    if (!this.#hooks.intact({ id: r.message, body: r.body, checksum: r.checksum }, !open)) {
      // as a lease does: its copy goes to the dead letters (integrity, with its alert), never
      // to the agent, and its channel is released
      if (open) this.#deliveries.quarantine(r.id, now);
      return replyAnswer(r, r.attempt, DeliveryState.deadLetter, null, false);
    }
    switch (replyStep(r, now, this.#hooks.paused(agent))) {
      case 'wait':
        return undefined;
      case 'as_is':
        return replyAnswer(r, r.attempt, r.state, r.lease_expires_at, true);
      case 'lease': {
        const [attempt] = this.#deliveries.lease([r.id], now);
        const expires = now + this.#deliveries.leaseMs;
        return replyAnswer(r, attempt!, DeliveryState.leased, expires, true);
      }
      case 'renew': {
        const expires = now + this.#deliveries.leaseMs;
        this.#s.extendLease.run(expires, r.id);
        // as an extension's: the lease's new end
        const detail = JSON.stringify({ lease_expires_at: new Date(expires).toISOString() });
        this.#s.event.run(r.message, r.id, r.recipient, now, 'lease_extended', r.attempt, detail);
        this.#fx.timingChanged = true;
        return replyAnswer(r, r.attempt, DeliveryState.leased, expires, true);
      }
    }
  }
}
