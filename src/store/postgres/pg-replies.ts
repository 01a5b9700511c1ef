/**
 * An ask's reply on PostgreSQL (the store's take_reply; docs/design/time.md, "Asking"), as
 * sqlite/sqlite-replies.ts takes it, inside the group's transaction. The group locked the
 * asker's agents row first (pg-store.ts #lockGroup), as it does for a lease: every lease and
 * take of that agent's deliveries, on every replica, waits for it, so two replicas never both
 * lease the copy, and the row read here is the row as it is.
 */
import { uuidv7Time } from '../../protocol/ids.js';
import { notAsked, type ReplyRow, replyAnswer, replyStep } from '../rules/replies.js';
import type { BodyRow } from '../rules/stored-message.js';
import { type DeliveryJson, DeliveryState } from '../store.js';
import type { PgDeliveries } from './pg-deliveries.js';
import type { Tx } from './pg-tx.js';

/**
 * The reply to `messageId` held by `agent` (its row locked by this transaction), taken
 * (rules/replies.ts replyStep): the delivery's JSON with its state, or undefined while there
 * is none to hand over. 404 `not_found` unless `agent` sent `messageId`; a scheduled message of
 * its own that has not fired is no error. `intact`: the store's checksum check of a message.
 */
export async function takeReply(
  tx: Tx,
  deliveries: PgDeliveries,
  agent: string,
  messageId: string,
  now: number,
  intact: (row: BodyRow, report: boolean) => boolean,
): Promise<DeliveryJson | undefined> {
  const at = uuidv7Time(messageId);
  const asked =
    at === undefined
      ? undefined
      : await tx.one<{ sender: string }>('messageSender', [at, messageId]);
  if (asked?.sender !== agent) {
    if (asked === undefined) {
      const scheduled = await tx.one<{ sender: string }>('scheduledSender', [messageId]);
      if (scheduled?.sender === agent) return undefined;
    }
    throw notAsked(agent, messageId);
  }
  const r = await tx.one<ReplyRow>('replyCopy', [messageId, agent]);
  if (r === undefined) return undefined;
  const open = r.state === DeliveryState.pending || r.state === DeliveryState.leased;
  if (!intact({ id: r.message, body: r.body, checksum: r.checksum }, !open)) {
    if (open) await deliveries.quarantine(tx, r.id, now);
    return replyAnswer(r, r.attempt, DeliveryState.deadLetter, null, false);
  }
  switch (replyStep(r, now, tx.agent(agent).paused !== null)) {
    case 'wait':
      return undefined;
    case 'as_is':
      return replyAnswer(r, r.attempt, r.state, r.lease_expires_at, true);
    case 'lease': {
      const [attempt] = deliveries.lease(tx, [r], now);
      const expires = now + deliveries.leaseMs;
      return replyAnswer(r, attempt!, DeliveryState.leased, expires, true);
    }
    case 'renew': {
      const expires = now + deliveries.leaseMs;
      // with its journey's `lease_extended`, as an extension writes it
      const detail = JSON.stringify({ lease_expires_at: new Date(expires).toISOString() });
      tx.write('extendLeases', [expires, [r.id], now, detail]);
      tx.changed(r.id, { lease_expires_at: expires });
      tx.fx.timingChanged = true;
      return replyAnswer(r, r.attempt, DeliveryState.leased, expires, true);
    }
  }
}
