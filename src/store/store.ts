/**
 * The types the write path hands the store (sqlite-store.ts) and gets back.
 */
import type { Assignment, Priority } from '../protocol/envelope.js';
import type { GatewayError } from '../protocol/errors.js';

/** A validated, routed message on its way into the store. */
export interface MessageDraft {
  readonly sender: string;
  readonly idempotencyKey: string;
  /** SHA-256 of the canonical request body: same key, other body is a 409. */
  readonly fingerprint: Buffer;
  /** The channel the message travels in: a group channel, or '@agent' for a direct message. */
  readonly channel: string;
  readonly kind: string;
  readonly priority: Priority;
  readonly replyTo: number | null;
  /** The payload, already serialized: stored and served as these bytes. */
  readonly payloadJson: string;
  /** Receipt time, ms since the epoch: becomes timestamp_iso8601. */
  readonly receivedAt: number;
  /** Who gets a delivery row (the sender of a channel message is not among them). */
  readonly recipients: readonly string[];
}

export type AppendOutcome =
  | { readonly status: 201 | 200; readonly assignment: Assignment }
  | { readonly status: 'rejected'; readonly error: GatewayError };
