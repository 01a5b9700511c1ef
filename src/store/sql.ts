/**
 * Every SQL string of the SQLite store, in one reviewable place: the numbered migrations first,
 * then the statements the store prepares once at open.
 */

/**
 * Migration N brings the schema from version N-1 to N (PRAGMA user_version). Never edit a
 * migration that has shipped: add the next one.
 */
export const MIGRATIONS: readonly string[] = [
  // 1: messages with their per-channel sequence, idempotency keys, per-recipient deliveries.
  `
  -- One row per channel, group or direct ('@agent'). last_seq is the channel's counter: kept
  -- here rather than derived from max(seq) so that pruning old messages can never make a
  -- sequence number come round again.
  CREATE TABLE channels (
    name     TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL DEFAULT 0
  ) WITHOUT ROWID;

  CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    message_id      TEXT    NOT NULL,
    channel         TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    sender          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL, -- SHA-256 of the canonical request body (409 on mismatch)
    kind            TEXT    NOT NULL,
    priority        INTEGER NOT NULL, -- 0 normal, 1 critical
    received_at     INTEGER NOT NULL, -- ms since the epoch
    body            TEXT    NOT NULL  -- the message as readers see it, JSON
  );
  CREATE UNIQUE INDEX messages_by_channel_seq ON messages (channel, seq);
  CREATE UNIQUE INDEX messages_by_sender_key ON messages (sender, idempotency_key);

  -- One row per recipient of a message: fan-out with per-recipient state (seed 000, "Group
  -- Channels"). state: 0 pending, 1 leased, 2 acked.
  CREATE TABLE deliveries (
    id               INTEGER PRIMARY KEY,
    message          INTEGER NOT NULL REFERENCES messages (id),
    recipient        TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    state            INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0,
    available_at     INTEGER NOT NULL,
    lease_expires_at INTEGER
  );
  CREATE INDEX deliveries_by_recipient ON deliveries (recipient, state, priority, id);
  CREATE INDEX deliveries_by_message ON deliveries (message);
  `,
];

export const SQL = {
  userVersion: 'PRAGMA user_version',
  ensureChannel: 'INSERT INTO channels (name) VALUES (?) ON CONFLICT (name) DO NOTHING',
  lastSeq: 'SELECT last_seq FROM channels WHERE name = ?',
  nextSeq: 'UPDATE channels SET last_seq = last_seq + 1 WHERE name = ? RETURNING last_seq',
  findByKey: `
    SELECT message_id, channel, seq, received_at, fingerprint
    FROM messages WHERE sender = ? AND idempotency_key = ?`,
  insertMessage: `
    INSERT INTO messages
      (message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
       received_at, body)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  insertDelivery: `
    INSERT INTO deliveries (message, recipient, priority, available_at) VALUES (?, ?, ?, ?)`,
  channelMessages: `
    SELECT body FROM messages WHERE channel = ? AND seq > ? ORDER BY seq LIMIT ?`,
} as const;
