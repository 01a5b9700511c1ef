/**
 * Every SQL string of the sidecar's own SQLite file (AGW_OUTBOX), in one reviewable place: its
 * numbered migrations, then the statements sidecar-file.ts prepares once at open.
 */

/** The sidecar's own file (AGW_OUTBOX): its outbox, local dead letters and breaker state. */
export const SIDECAR_MIGRATIONS: readonly string[] = [
  `
  -- Messages the agent handed over that the adapter has not acknowledged yet, in the order they
  -- were accepted (seq). The key is unique: a repeat of a queued message is not queued twice.
  CREATE TABLE outbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT    NOT NULL UNIQUE,
    body            TEXT    NOT NULL,
    queued_at       INTEGER NOT NULL
  );
  -- Queued messages the adapter refused for good while draining (a 403 after a topology change).
  CREATE TABLE local_dead_letters (
    id              INTEGER PRIMARY KEY,
    idempotency_key TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    status          INTEGER NOT NULL,
    answer          TEXT    NOT NULL,
    created_at      INTEGER NOT NULL
  );
  CREATE TABLE state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) WITHOUT ROWID;
  -- Inbox repair: the last channel_sequence_id handed to the agent per channel; the messages
  -- the agent acked through the sidecar (their redeliveries are acked upstream, not handed
  -- over again); deliveries the sidecar made itself from a replay (negative ids to the agent).
  CREATE TABLE handed (
    channel  TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE TABLE acked (
    message_id TEXT PRIMARY KEY,
    acked_at   INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE INDEX acked_by_time ON acked (acked_at);
  CREATE TABLE local_deliveries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL
  );
  `,
  // 2: inbox repair that keeps its place on disk. A gap being scanned per channel (messages
  // after `after` and before `until` are still to look at), copies made from replay with leases
  // of their own (redelivered until acked), and adapter deliveries held back behind a gap or an
  // unacked copy of their channel. Copies of version 1 had no body and were handed once: done.
  `
  CREATE TABLE gaps (
    channel TEXT PRIMARY KEY,
    after   INTEGER NOT NULL,
    until   INTEGER NOT NULL
  ) WITHOUT ROWID;
  ALTER TABLE local_deliveries ADD COLUMN channel TEXT NOT NULL DEFAULT '';
  ALTER TABLE local_deliveries ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE local_deliveries ADD COLUMN body TEXT NOT NULL DEFAULT '';
  ALTER TABLE local_deliveries ADD COLUMN lease_ms INTEGER NOT NULL DEFAULT 30000;
  ALTER TABLE local_deliveries ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE local_deliveries ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE local_deliveries ADD COLUMN done INTEGER NOT NULL DEFAULT 0;
  UPDATE local_deliveries SET done = 1;
  CREATE INDEX local_open ON local_deliveries (channel, seq) WHERE done = 0;
  CREATE TABLE held (
    message_id TEXT PRIMARY KEY,
    channel    TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    delivery   TEXT    NOT NULL
  ) WITHOUT ROWID;
  CREATE INDEX held_by_channel ON held (channel, seq);
  `,
  // 3: replies handed to an ask (docs/design/time.md, "Asking"), out of their channel's order:
  // they count as handed over, so a gap scan past them does not hand them again, and an ack of
  // their delivery id is matched to the message also after a restart. Forgotten with the acks.
  `
  CREATE TABLE taken (
    message_id TEXT    PRIMARY KEY,
    channel    TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    delivery   INTEGER NOT NULL, -- the adapter's delivery id it was handed with
    taken_at   INTEGER NOT NULL
  ) WITHOUT ROWID;
  CREATE INDEX taken_by_time ON taken (taken_at);
  `,
];

export const SIDECAR_SQL = {
  enqueue: `
    INSERT INTO outbox (idempotency_key, body, queued_at) VALUES (?, ?, ?)
    ON CONFLICT (idempotency_key) DO NOTHING`,
  depth: 'SELECT count(*) FROM outbox',
  peek: 'SELECT seq, idempotency_key, body FROM outbox ORDER BY seq LIMIT ?',
  remove: 'DELETE FROM outbox WHERE seq = ?',
  deadLetter: `
    INSERT INTO local_dead_letters (idempotency_key, body, status, answer, created_at)
    VALUES (?, ?, ?, ?, ?)`,
  deadLetterCount: 'SELECT count(*) FROM local_dead_letters',
  deadLetterPage: `
    SELECT id, idempotency_key, body, status, answer, created_at FROM local_dead_letters
    WHERE id > ? ORDER BY id LIMIT ?`,
  queuedBody: 'SELECT body FROM outbox WHERE idempotency_key = ?',
  // a message's journey at its sender (docs/design/journey.md, "The sidecar's part")
  queuedAt: 'SELECT queued_at FROM outbox WHERE idempotency_key = ?',
  deadLetterByKey: `
    SELECT id, idempotency_key, body, status, answer, created_at FROM local_dead_letters
    WHERE idempotency_key = ? ORDER BY id DESC LIMIT 1`,
  getState: 'SELECT value FROM state WHERE key = ?',
  handedSeq: 'SELECT last_seq FROM handed WHERE channel = ?',
  setHanded: `
    INSERT INTO handed (channel, last_seq) VALUES (?, ?)
    ON CONFLICT (channel) DO UPDATE SET last_seq = max(last_seq, excluded.last_seq)`,
  isAcked: 'SELECT 1 FROM acked WHERE message_id = ?',
  markAcked: 'INSERT INTO acked (message_id, acked_at) VALUES (?, ?) ON CONFLICT DO NOTHING',
  pruneAcked: 'DELETE FROM acked WHERE acked_at < ?',
  localDelivery: 'SELECT message_id, done FROM local_deliveries WHERE id = ?',
  // inbox repair v2
  gaps: 'SELECT channel, after, until FROM gaps',
  setGap: `
    INSERT INTO gaps (channel, after, until) VALUES (?, ?, ?)
    ON CONFLICT (channel) DO UPDATE SET after = excluded.after, until = excluded.until`,
  dropGap: 'DELETE FROM gaps WHERE channel = ?',
  addCopy: `
    INSERT INTO local_deliveries (message_id, channel, seq, body, lease_ms) VALUES (?, ?, ?, ?, ?)`,
  openCopies: `
    SELECT id, message_id, channel, seq, body, lease_ms, lease_expires_at, attempt
    FROM local_deliveries WHERE done = 0 ORDER BY channel, seq`,
  leaseCopy: 'UPDATE local_deliveries SET lease_expires_at = ?, attempt = attempt + 1 WHERE id = ?',
  copyDue: 'UPDATE local_deliveries SET lease_expires_at = 0 WHERE id = ? AND done = 0',
  copyLeased: `
    SELECT 1 FROM local_deliveries WHERE id = ? AND done = 0 AND lease_expires_at > ?`,
  extendCopy: 'UPDATE local_deliveries SET lease_expires_at = ? WHERE id = ?',
  copyDone: 'UPDATE local_deliveries SET done = 1 WHERE id = ?',
  hold: `
    INSERT INTO held (message_id, channel, seq, delivery) VALUES (?, ?, ?, ?)
    ON CONFLICT (message_id) DO UPDATE SET delivery = excluded.delivery`,
  heldAll: 'SELECT message_id, channel, seq, delivery FROM held ORDER BY channel, seq',
  unhold: 'DELETE FROM held WHERE message_id = ?',
  setState: `
    INSERT INTO state (key, value) VALUES (?, ?)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
  // replies handed to an ask (v3)
  takenAll: 'SELECT message_id, channel, seq, delivery, taken_at AS at FROM taken',
  markTaken: `
    INSERT INTO taken (message_id, channel, seq, delivery, taken_at) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (message_id) DO UPDATE SET delivery = excluded.delivery`,
  pruneTaken: 'DELETE FROM taken WHERE taken_at < ?',
} as const;
