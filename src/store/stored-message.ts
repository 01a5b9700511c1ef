/**
 * A stored message as every store writes it: its assignment, its JSON (what readers are
 * served, checksummed), the bytes it is estimated at before it is written, and the rows it is
 * read back from. Shared by the SQLite and the PostgreSQL store so that both store and serve
 * byte-identical messages.
 */
import type { Assignment } from '../protocol/envelope.js';
import type { GatewayError } from '../protocol/errors.js';
import { type AppendOutcome, DeliveryState, type MessageDraft } from './store.js';
import type { Placement } from './thread-rows.js';

/** A stored message's bytes besides its payload: the assigned fields and the envelope's. */
export const HEAD_BYTES = 320;

export function rejected(error: GatewayError): AppendOutcome {
  return { status: 'rejected', error };
}

export function assignment(
  id: string,
  channel: string,
  seq: number,
  at: number,
  d: MessageDraft,
  threadId: string,
  hop: number,
): Assignment {
  return {
    message_id: id,
    channel,
    channel_sequence_id: seq,
    timestamp_iso8601: new Date(at).toISOString(),
    idempotency_key: d.idempotencyKey,
    // the same key with the same fingerprint is the same priority: it is part of the fingerprint
    priority: d.priority,
    thread_id: threadId,
    hop,
  };
}

/**
 * The stored message: the assigned fields, the envelope, and the payload bytes as sent. A reply
 * carries `reply_to`, the message it answers, however it named it; `hop` comes last before the
 * payload (withThreadFields tells the rows written before threads by its absence there).
 */
export function messageJson(a: Assignment, d: MessageDraft, p: Placement): string {
  const head = JSON.stringify({
    message_id: a.message_id,
    channel: a.channel,
    channel_sequence_id: a.channel_sequence_id,
    sender: d.sender,
    timestamp_iso8601: a.timestamp_iso8601,
    idempotency_key: d.idempotencyKey,
    to: d.channel,
    kind: d.kind,
    priority: d.priority,
    ...(d.replyTo === null ? {} : { reply_to_sequence_id: d.replyTo }),
    ...(p.replyTo === null ? {} : { reply_to: p.replyTo }),
    thread_id: a.thread_id,
    hop: a.hop,
  });
  return `${head.slice(0, -1)},"payload":${d.payloadJson}}`;
}

/** The rows both stores read messages, replay pages and dead letters from. */
export interface BodyRow {
  id: number;
  body: string;
  checksum: number;
}

export interface ChannelRow extends BodyRow {
  seq: number;
}

export interface DeadRow extends BodyRow {
  reason: string;
  note: string | null;
  attempts: number;
  recipient: string;
  created_at: number;
  replay_delivery: number | null;
  message: number;
}

export interface RecipientRow {
  recipient: string;
  state: number;
  attempt: number;
  reason: string | null;
  note: string | null;
}

/** A delivery state's name, as readers are told it. */
export const STATE_NAME = {
  [DeliveryState.pending]: 'pending',
  [DeliveryState.leased]: 'leased',
  [DeliveryState.acked]: 'acked',
  [DeliveryState.deadLetter]: 'dead_letter',
} as const;
