/**
 * A stored message as every store writes it: its assignment, its JSON (what readers are
 * served, checksummed), the bytes it is estimated at before it is written, and the rows it is
 * read back from. Shared by the SQLite and the PostgreSQL store so that both store and serve
 * byte-identical messages.
 */
import { crc32 } from 'node:zlib';
import { ADAPTER_SENDER, type Assignment } from '../../protocol/envelope.js';
import { GatewayError } from '../../protocol/errors.js';
import { uuidv7 } from '../../protocol/ids.js';
import { type AppendOutcome, DeliveryState, type MessageDraft } from '../store.js';
import type { DueAlert } from './alert-rows.js';
import { messageSize } from './storage.js';
import type { Placement } from './thread-rows.js';

export function rejected(error: GatewayError): AppendOutcome {
  return { status: 'rejected', error };
}

export function assignment(
  id: string,
  channel: string,
  seq: number | null,
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
    ...timeFields(d),
  };
}

/** A message's times as readers see them: absent when it has none. */
function timeFields(d: MessageDraft): { scheduled_for?: string; expires_at?: string } {
  return {
    ...(d.deliverAt === undefined ? {} : { scheduled_for: new Date(d.deliverAt).toISOString() }),
    ...(d.expiresAt === undefined ? {} : { expires_at: new Date(d.expiresAt).toISOString() }),
  };
}

/**
 * A deadline already past at receipt: 400 naming the field. Asked after the idempotency key, so
 * a retry of a stored message is its duplicate even after the deadline.
 */
export function pastDeadline(d: MessageDraft): GatewayError | undefined {
  if (d.expiresAt === undefined || d.expiresAt > d.receivedAt) return undefined;
  return new GatewayError(
    'invalid_envelope',
    `expires_at: ${new Date(d.expiresAt).toISOString()} is already past`,
    { field: 'expires_at' },
  );
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
    // after hop: withThreadFields and sequenceOf read the head before the payload
    traceparent: d.trace?.traceparent,
    tracestate: d.trace?.tracestate,
    scheduled_for: a.scheduled_for,
    expires_at: a.expires_at,
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

/** A dead letter as a replay reads it, with what its delivery again needs. */
export interface DeadLetterRow {
  id: number;
  /** Its message's kind (the PostgreSQL store reads it for the alert a refusal raises). */
  kind?: string;
  channel: string;
  message: number;
  recipient: string;
  replay_delivery: number | null;
  priority: number;
  message_id: string;
  /** The dead copy's deadline, which its replay keeps (null: none). */
  expires_at?: number | null;
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

/** A stored message as its idempotency key finds it. */
export interface KeyRow {
  message_id: string;
  channel: string;
  /** Null while it is scheduled. */
  seq: number | null;
  /** A scheduled message's deliver_at, ms, until it fires. */
  deliver_at?: number | null;
  received_at: number;
  fingerprint: Buffer;
  thread_id: string;
  hop: number;
}

/**
 * A draft whose key is already stored: 200 with the stored assignment when it is the same
 * message (its fingerprint), else refused `idempotency_conflict`.
 */
export function repeatOutcome(prior: KeyRow, d: MessageDraft): AppendOutcome {
  if (!prior.fingerprint.equals(d.fingerprint)) {
    return rejected(
      new GatewayError(
        'idempotency_conflict',
        `idempotency_key ${d.idempotencyKey} was already used for a different message (${prior.message_id})`,
        { field: 'idempotency_key' },
      ),
    );
  }
  const { message_id, channel, seq, received_at, thread_id, hop } = prior;
  // the times as stored, not as this retry's receipt would make them (ttl_ms counts from it)
  const times = { deliverAt: prior.deliver_at ?? undefined, expiresAt: undefined };
  return {
    status: 200,
    assignment: assignment(
      message_id,
      channel,
      seq,
      received_at,
      { ...d, ...times },
      thread_id,
      hop,
    ),
  };
}

/**
 * A messages row as both engines insert it: message_id, channel, seq, sender,
 * idempotency_key, fingerprint, kind, priority (1: critical), received_at, body, checksum, size,
 * thread_id (null: it starts one), hop, reply_to_id (the message_id it answers, null: none).
 */
export type MessageRow = readonly [
  string,
  string,
  number,
  string,
  string,
  Buffer,
  string,
  number,
  number,
  string,
  number,
  number,
  string | null,
  number,
  string | null,
];

/**
 * A new message as it is stored: its assignment, its row (with the JSON readers are served, its
 * CRC-32 and its size against its sender) and its priority as the deliveries keep it.
 */
export function newMessage(
  id: string,
  seq: number,
  d: MessageDraft,
  placed: Placement,
  indexBytes = 0,
): { assignment: Assignment; row: MessageRow; size: number; priority: number } {
  const a = assignment(id, d.channel, seq, d.receivedAt, d, placed.threadId ?? id, placed.hop);
  const body = messageJson(a, d, placed);
  const size = messageSize(Buffer.byteLength(body) + indexBytes, d.recipients.length);
  const priority = d.priority === 'critical' ? 1 : 0;
  const row: MessageRow = [
    id,
    d.channel,
    seq,
    d.sender,
    d.idempotencyKey,
    d.fingerprint,
    d.kind,
    priority,
    d.receivedAt,
    body,
    crc32(body),
    size,
    placed.threadId,
    placed.hop,
    placed.replyTo,
  ];
  return { assignment: a, row, size, priority };
}

/** An alert that fell due, as the message from the adapter to @alertsTo that carries it. */
export function alertDraft(a: DueAlert, alertsTo: string): MessageDraft {
  return {
    sender: ADAPTER_SENDER,
    idempotencyKey: uuidv7(a.at),
    fingerprint: Buffer.alloc(32),
    channel: `@${alertsTo}`,
    kind: a.kind,
    priority: 'critical',
    replyTo: null,
    payloadJson: JSON.stringify(a.payload),
    receivedAt: a.at,
    recipients: [alertsTo],
  };
}
