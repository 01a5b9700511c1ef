/**
 * The durable store behind the adapter. SQLite is the engine today (sqlite-store.ts); the
 * interface is what the adapter needs, so another engine can stand behind it later.
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

export interface Store {
  /**
   * Appends drafts in one transaction, in order, and returns once it has committed: one outcome
   * per draft. A draft that is refused (409, unknown reply_to) writes nothing and does not stop
   * the others. Throws only if the transaction itself fails; then nothing was written.
   */
  append(drafts: readonly MessageDraft[]): AppendOutcome[];
  /** Messages of a channel with sequence > afterSeq, in order, as stored JSON text. */
  channelMessages(channel: string, afterSeq: number, limit: number): string[];
  /** Creates the sequence counters of these channels if they are new. */
  ensureChannels(names: Iterable<string>): void;
  /** PRAGMA quick_check on a separate connection in a worker thread: [] when healthy. */
  quickCheck(): Promise<string[]>;
  close(): void;
}
