/**
 * The contract's numbers (docs/reference/adapter-api.md), written once: both programs read them
 * here, so the sidecar can never accept what the adapter would refuse, nor wait longer than it
 * may.
 */

/** The longest a long poll may wait, s (GET /v1/inbox?wait=S). */
export const MAX_WAIT_S = 30;

/**
 * The longest one wait for an ask's reply may park, s (GET /v1/messages/{id}/reply?wait=S):
 * 25, as an MCP tool's wait. An ask waits longer (its timeout_ms) in steps of this, each a
 * request of its own, so no one request outlives a proxy's or a client's idle deadline.
 */
export const MAX_REPLY_WAIT_S = 25;

/** How long an ask waits for its reply when it does not say, ms (POST /v1/ask `timeout_ms`). */
export const ASK_DEFAULT_TIMEOUT_MS = 30_000;

/**
 * The longest an ask may wait for its reply, ms: 15 minutes, the longest lease by default
 * (AGW_MAX_LEASE_MS). Longer than that, a task is work to hand over and check on later
 * (send_message, then message_status or await_reply), not a question to block on.
 */
export const ASK_MAX_TIMEOUT_MS = 900_000;

/** Envelopes one POST /v1/messages/batch may carry; also the sidecar's drain batch. */
export const MAX_BATCH = 100;

/** The default largest envelope, bytes (AGW_MAX_MESSAGE_BYTES): 256 KiB. */
export const DEFAULT_MAX_MESSAGE_BYTES = 262_144;

/** Deliveries one poll hands out: default and most (GET /v1/inbox?max=N). */
export const INBOX_DEFAULT_MAX = 10;
export const INBOX_MAX = 100;

/** A page of a replay or of the dead letters: default and most (?limit=N). */
export const PAGE_DEFAULT_LIMIT = 100;
export const PAGE_MAX_LIMIT = 1000;

/**
 * The default byte bound of one paged answer (replay, inbox, dead letters; AGW_MAX_PAGE_BYTES):
 * 8 MiB. A page ends early rather than pass it, and holds at least one item however large
 * (one message is at most AGW_MAX_MESSAGE_BYTES anyway). At the 1,000-message page limit and
 * 256 KiB messages a page was 262 MB as one string; a few parallel replays took a 1 GiB pod down.
 */
export const DEFAULT_MAX_PAGE_BYTES = 8 * 1024 * 1024;

/**
 * Bytes a page counts for each item beside the item's own JSON: the fields it puts around it
 * (a delivery's 88 bytes at most; for a replay the item's `delivery_states` entry,
 * `"<uuid>":"dead_letter",`, 55) and the comma. Stores count it with every item (`maxBytes`).
 */
export const PAGE_ITEM_OVERHEAD = 128;

/**
 * What a page's items may take of `maxPageBytes` (the store's `maxBytes`): the rest, 512 bytes,
 * is kept for the page's wrapper (`{"messages":[...],"delivery_states":{},"next_after":N}` and
 * the like).
 */
export function pageBudget(maxPageBytes: number): number {
  return Math.max(0, maxPageBytes - 512);
}

/**
 * The default bound of concurrent GET /v1/inbox requests of one agent (AGW_MAX_POLLS_PER_AGENT);
 * past it 429 `too_many_polls`. Each parked poll holds a socket and, once woken, a page of up to
 * AGW_MAX_PAGE_BYTES: an agent's token must not be able to pin the adapter's memory with them.
 */
export const DEFAULT_MAX_POLLS_PER_AGENT = 32;

/**
 * Connections the sidecar keeps for its long polls to the adapter: half the adapter's default
 * bound per agent, so that a restarted sidecar's new polls and its old ones still parked upstream
 * (until the adapter sees their sockets close, at most MAX_WAIT_S) stay within it together.
 */
export const SIDECAR_POLL_CONNECTIONS = 16;

/** Delivery ids one ack or nack may name. */
export const MAX_DELIVERY_IDS = 1000;

/**
 * How deep a payload's objects and arrays may nest (the payload itself is level 1). 64 is far
 * beyond any message a model writes, and keeps every reader that walks a payload (the
 * fingerprint's canonical JSON, an agent's own code) far from its stack's end.
 */
export const MAX_DEPTH = 64;

/**
 * The longest lease extension the sidecar passes on, ms (a day): the adapter holds each to its
 * own AGW_MAX_LEASE_MS, which the sidecar does not know; it checks only the shape.
 */
export const SIDECAR_MAX_EXTEND_MS = 86_400_000;

/** The default longest lease an extension may ask for, ms (AGW_MAX_LEASE_MS): 15 minutes. */
export const DEFAULT_MAX_LEASE_MS = 900_000;
