/**
 * The storage bounds both engines enforce (StorageLimits in store.ts; docs/design/durability.md
 * for how each engine counts): what a message counts against its sender, and whether a new one
 * is admitted. A refusal is 503 `storage_full` and nothing of the message is written. Pure: the
 * engines bring the counts (sqlite/storage-budget.ts; the PostgreSQL store's agents rows).
 */
import { GatewayError } from '../../protocol/errors.js';
import type { MessageDraft, StorageLimits } from '../store.js';

/**
 * Measured on the SQLite store: 20,000 messages of 388 stored bytes took 778 bytes each with one
 * recipient and 1,296 with five; so about 256 for the row and its three index entries and
 * about 128 per delivery row with its indexes. SQLite's migration 3 uses the same numbers:
 * never change them without a migration that recounts `size`.
 */
export const MESSAGE_OVERHEAD_BYTES = 256;
export const DELIVERY_OVERHEAD_BYTES = 128;

/**
 * One journey event's row with its index entry, as PostgreSQL stores it: measured 184 bytes for
 * 100,000 events, two thirds with a lease's detail (PostgreSQL 15). Counted by the PostgreSQL
 * store's size bound; SQLite's bound counts the pages in use, events included.
 */
export const JOURNEY_EVENT_BYTES = 184;

/**
 * Retry-After of `storage_full`: space comes back when retention runs (hourly) or an operator
 * acts, not in a second; 30 s keeps a fleet of sidecars from asking every second meanwhile.
 */
export const STORAGE_FULL_RETRY_AFTER_S = 30;

/** A stored message's bytes besides its payload: the assigned fields and the envelope's. */
export const HEAD_BYTES = 320;

/** What a message counts against its sender: its stored bytes and rows. */
export function messageSize(bodyBytes: number, recipients: number): number {
  return bodyBytes + MESSAGE_OVERHEAD_BYTES + DELIVERY_OVERHEAD_BYTES * recipients;
}

/** A draft's size before it is written (its JSON is not made yet): payload plus HEAD_BYTES. */
export function draftSize(d: MessageDraft, indexBytes = 0): number {
  return messageSize(
    Buffer.byteLength(d.payloadJson) + HEAD_BYTES + indexBytes,
    d.recipients.length,
  );
}

/**
 * The characters of a message's text (its payload's strings, then its kind) that full-text
 * search indexes on SQLite (sqlite/sql.ts, migration 9): the first 4,096. A bound on what the
 * index adds to a message, which the SQLite store counts against its sender with the message.
 */
export const SEARCH_TEXT_CHARS = 4096;

/** What the search index adds to a message's size: at most its text's first SEARCH_TEXT_CHARS. */
export function searchIndexBytes(d: MessageDraft): number {
  return Math.min(d.payloadJson.length, SEARCH_TEXT_CHARS) + d.kind.length;
}

/**
 * The refusal of a new message of `bytes` from `sender` past a bound; undefined when it may be
 * written. `used`: the store's bytes in use; `mine`: the sender's stored bytes; `available`:
 * the free bytes the store could still grow into, asked only when a reserve is kept (undefined:
 * not visible to this engine).
 */
export function storageRefusal(
  sender: string,
  bytes: number,
  used: number,
  mine: number,
  limits: StorageLimits,
  available?: () => number,
): GatewayError | undefined {
  const { maxBytes, senderShare, reserveBytes } = limits;
  if (used + bytes > maxBytes) {
    return full(
      `the store uses ${mib(used)} of its ${mib(maxBytes)} (AGW_MAX_STORE_BYTES); new messages wait for retention to free space`,
    );
  }
  const share = Math.floor(maxBytes * senderShare);
  if (mine + bytes > share) {
    return full(
      `${sender}'s stored messages use ${mib(mine)} of its share of ${mib(share)} (AGW_SENDER_SHARE_PERCENT of AGW_MAX_STORE_BYTES)`,
    );
  }
  if (reserveBytes > 0 && available !== undefined) {
    const free = available();
    if (free - bytes < reserveBytes) {
      return full(
        `the store's volume has ${mib(free)} free, and ${mib(reserveBytes)} are kept free (AGW_MIN_FREE_BYTES)`,
      );
    }
  }
  return undefined;
}

function full(message: string): GatewayError {
  return new GatewayError('storage_full', message, { retryAfterS: STORAGE_FULL_RETRY_AFTER_S });
}

function mib(bytes: number): string {
  return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
}
