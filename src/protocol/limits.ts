/**
 * The contract's numbers (CONTRACT.md), written once: both programs read them here, so the
 * sidecar can never accept what the adapter would refuse, nor wait longer than it may.
 */

/** The longest a long poll may wait, s (GET /v1/inbox?wait=S). */
export const MAX_WAIT_S = 30;

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

/** Delivery ids one ack or nack may name. */
export const MAX_DELIVERY_IDS = 1000;

/**
 * How deep a payload's objects and arrays may nest (the payload itself is level 1). 64 is far
 * beyond any message a model writes, and keeps every reader that walks a payload (the
 * fingerprint's canonical JSON, an agent's own code) far from its stack's end.
 */
export const MAX_DEPTH = 64;

/** The default longest lease an extension may ask for, ms (AGW_MAX_LEASE_MS): 15 minutes. */
export const DEFAULT_MAX_LEASE_MS = 900_000;
