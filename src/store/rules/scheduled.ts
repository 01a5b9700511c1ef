/**
 * Scheduled messages as both stores keep them (docs/design/time.md): what a `scheduled` row's
 * `draft` column holds, the draft and placement it fires with, and the refusals of a cancel.
 */
import { GatewayError } from '../../protocol/errors.js';
import type { Priority } from '../../protocol/priority.js';
import type { TraceContext } from '../../protocol/trace-context.js';
import type { MessageDraft, MessageStatus } from '../store.js';
import { assignment, messageJson } from './stored-message.js';
import type { Placement } from './thread-rows.js';

/** Scheduled messages fired per statement in a sweep. */
export const SWEEP_SCHEDULED = 200;

/** The `draft` column: what firing needs beyond the row's own columns. */
interface StoredDraft {
  kind: string;
  priority: Priority;
  replyTo: number | null;
  payloadJson: string;
  recipients: string[];
  trace?: TraceContext;
  expiresAt?: number;
  threadId: string | null;
  hop: number;
  replyToId: string | null;
  count: number;
}

/** A `scheduled` row as the sweep reads it. */
export interface ScheduledRow {
  id: number;
  message_id: string;
  sender: string;
  idempotency_key: string;
  fingerprint: Buffer;
  channel: string;
  received_at: number;
  deliver_at: number;
  draft: string;
}

export function scheduledDraft(d: MessageDraft, placed: Placement): string {
  const stored: StoredDraft = {
    kind: d.kind,
    priority: d.priority,
    replyTo: d.replyTo,
    payloadJson: d.payloadJson,
    recipients: [...d.recipients],
    ...(d.trace === undefined ? {} : { trace: d.trace }),
    ...(d.expiresAt === undefined ? {} : { expiresAt: d.expiresAt }),
    threadId: placed.threadId,
    hop: placed.hop,
    replyToId: placed.replyTo,
    count: placed.count,
  };
  return JSON.stringify(stored);
}

/** The draft and placement a scheduled row fires with: as they were when it was sent. */
export function fromScheduled(r: ScheduledRow): { draft: MessageDraft; placed: Placement } {
  const x = JSON.parse(r.draft) as StoredDraft;
  const draft: MessageDraft = {
    sender: r.sender,
    idempotencyKey: r.idempotency_key,
    fingerprint: Buffer.from(r.fingerprint),
    channel: r.channel,
    kind: x.kind,
    priority: x.priority,
    replyTo: x.replyTo,
    replyToId: x.replyToId,
    payloadJson: x.payloadJson,
    receivedAt: Number(r.received_at),
    recipients: x.recipients,
    deliverAt: Number(r.deliver_at),
    ...(x.trace === undefined ? {} : { trace: x.trace }),
    ...(x.expiresAt === undefined ? {} : { expiresAt: x.expiresAt }),
  };
  return {
    draft,
    placed: { threadId: x.threadId, hop: x.hop, replyTo: x.replyToId, count: x.count },
  };
}

/**
 * Why a cancel of `messageId` by `caller` is refused, when it is no scheduled message of the
 * caller's still to fire: `owner` is the sender of the message stored under that id, if any.
 */
export function cancelRefusal(
  owner: string | undefined,
  caller: string,
  messageId: string,
): GatewayError {
  if (owner === undefined) return new GatewayError('not_found', `no message ${messageId}`);
  if (owner !== caller) {
    return new GatewayError('not_your_message', `message ${messageId} is not yours to cancel`);
  }
  return new GatewayError(
    'already_sent',
    `message ${messageId} was sent already (it has its channel sequence); it can no longer be cancelled`,
  );
}

/** A scheduled message as GET /v1/messages/{id} tells it: no sequence, no recipients' states. */
export function scheduledStatus(r: ScheduledRow & { cancelled_at: number | null }): MessageStatus {
  const { draft, placed } = fromScheduled(r);
  const a = assignment(
    r.message_id,
    r.channel,
    null,
    draft.receivedAt,
    draft,
    placed.threadId ?? r.message_id,
    placed.hop,
  );
  return {
    message: messageJson(a, draft, placed),
    sender: r.sender,
    scheduled_for: new Date(Number(r.deliver_at)).toISOString(),
    ...(r.cancelled_at === null
      ? {}
      : { cancelled_at: new Date(Number(r.cancelled_at)).toISOString() }),
    scheduledTo: draft.recipients,
    recipients: [],
  };
}
