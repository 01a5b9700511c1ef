/**
 * An ask's reply (docs/design/time.md, "Asking"), as both engines take it: who may ask for the
 * reply to a message, and what becomes of the copy found. Pure: the engines read the rows
 * (the asked message's sender, then the reply's first copy held by the asker) and write what
 * this decides, in the transaction of the group commit, under the asker's lock on PostgreSQL.
 */
import { GatewayError } from '../../protocol/errors.js';
import { type ReplyState, replyJson } from '../../protocol/wire.js';
import { DeliveryState } from '../store.js';
import { withThreadFields } from './thread-rows.js';

/** The reply's copy as both engines read it: its delivery row, and its message's bytes. */
export interface ReplyRow {
  id: number;
  message: number;
  recipient: string;
  state: DeliveryState;
  attempt: number;
  priority: number;
  lease_expires_at: number | null;
  /** The copy's deadline, ms; null: none. */
  expires_at: number | null;
  body: string;
  checksum: number;
}

/**
 * What the store does with the copy it found:
 * - `lease`: a pending copy, leased to the asker now, ahead of earlier messages of its channel
 *   (it asked for this one by name, and is blocked until it has it);
 * - `renew`: a leased copy gets a whole lease again from now (the ask that leased it may have
 *   died with its sidecar; the one asking again holds it now);
 * - `as_is`: acked or dead-lettered, answered as it is; and a leased one past its deadline,
 *   which may be acked until its lease ends but never held longer (docs/design/time.md,
 *   "Deadlines");
 * - `wait`: none to hand over yet. A pending copy of a paused asker stays where it is, as an
 *   inbox poll's would (what the asker holds runs its course); one past its deadline is never
 *   leased, and the sweep armed for it makes it a dead letter, which the next ask finds.
 */
export type ReplyStep = 'lease' | 'renew' | 'as_is' | 'wait';

export function replyStep(
  r: Pick<ReplyRow, 'state' | 'expires_at'>,
  now: number,
  paused: boolean,
): ReplyStep {
  const expired = r.expires_at !== null && r.expires_at <= now;
  if (r.state === DeliveryState.pending) return paused || expired ? 'wait' : 'lease';
  if (r.state === DeliveryState.leased) return expired ? 'as_is' : 'renew';
  return 'as_is';
}

/** The refusal of an ask about a message that is not one the asker sent (or no message at all). */
export function notAsked(agent: string, messageId: string): GatewayError {
  return new GatewayError('not_found', `${agent} sent no message ${messageId.slice(0, 64)}`);
}

const NAMES: Readonly<Record<number, ReplyState>> = {
  [DeliveryState.leased]: 'leased',
  [DeliveryState.acked]: 'acked',
  [DeliveryState.deadLetter]: 'dead_letter',
};

/**
 * The answer for the copy as it is after the step: `attempt` and `leaseExpiresAt` as written
 * (a lease's new ones), `state` its state then. A corrupt message (`intact` false) is `null`.
 */
export function replyAnswer(
  r: Pick<ReplyRow, 'id' | 'body'>,
  attempt: number,
  state: DeliveryState,
  leaseExpiresAt: number | null,
  intact: boolean,
): string {
  const name = NAMES[state] ?? 'leased';
  const lease = state === DeliveryState.leased ? leaseExpiresAt : null;
  return replyJson(r.id, attempt, lease, name, intact ? withThreadFields(r.body) : 'null');
}
