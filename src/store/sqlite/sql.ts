/**
 * Every SQL string of the SQLite store, in one reviewable place: the numbered migrations first,
 * then the statements the store prepares once at open.
 */

import { GENESIS_HASH } from '../rules/operators.js';

/**
 * Migration N brings the schema from version N-1 to N (PRAGMA user_version). Never edit a
 * migration that has shipped: add the next one.
 */
export const MIGRATIONS: readonly string[] = [
  // 1: messages with their per-channel sequence and idempotency keys; per-recipient deliveries
  // with leases and attempts; dead letters; agents' last contact; alert aggregation.
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
    body            TEXT    NOT NULL, -- the message as readers see it, JSON
    checksum        INTEGER NOT NULL  -- CRC-32 of body, checked at every read
  );
  CREATE UNIQUE INDEX messages_by_channel_seq ON messages (channel, seq);
  CREATE UNIQUE INDEX messages_by_sender_key ON messages (sender, idempotency_key);
  CREATE INDEX messages_by_received_at ON messages (received_at);

  -- One row per recipient of a message: fan-out with per-recipient state (seed 000, "Group
  -- Channels"). state: 0 pending (waiting, or ready once available_at has passed), 1 leased,
  -- 2 acked, 3 dead-lettered. attempt counts hand-outs.
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
  CREATE INDEX deliveries_leased ON deliveries (lease_expires_at) WHERE state = 1;
  CREATE INDEX deliveries_waiting ON deliveries (available_at) WHERE state = 0;

  CREATE TABLE dead_letters (
    id              INTEGER PRIMARY KEY,
    delivery        INTEGER NOT NULL REFERENCES deliveries (id),
    message         INTEGER NOT NULL REFERENCES messages (id),
    recipient       TEXT    NOT NULL,
    reason          TEXT    NOT NULL, -- lease_expired, nacked, evicted, queue_full
    attempts        INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    replay_delivery INTEGER           -- the fresh delivery a replay made
  );
  CREATE INDEX dead_letters_by_message ON dead_letters (message);

  CREATE TABLE agents (
    id        TEXT PRIMARY KEY,
    last_seen INTEGER
  ) WITHOUT ROWID;

  -- Alerts to alerts_to are aggregated per (recipient, reason): at most one every 30 s, with
  -- the count since the last. Kept here so that a crash cannot lose a pending count.
  CREATE TABLE alert_state (
    recipient    TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    last_sent_at INTEGER NOT NULL DEFAULT 0,
    count        INTEGER NOT NULL DEFAULT 0,
    message_ids  TEXT    NOT NULL DEFAULT '[]',
    attempts     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (recipient, reason)
  ) WITHOUT ROWID;
  `,
  // 2: strict order per recipient and channel. Each delivery carries its channel, so that the
  // open deliveries (pending or leased) of one recipient form a lane per channel, in id order
  // (= commit order = sequence order): only a lane whose first open delivery is ready is served.
  // Dead letters keep the agent's note of a rejection.
  `
  ALTER TABLE deliveries ADD COLUMN channel TEXT NOT NULL DEFAULT '';
  UPDATE deliveries SET channel = (SELECT m.channel FROM messages m WHERE m.id = deliveries.message);
  CREATE INDEX deliveries_lanes ON deliveries (recipient, channel, id) WHERE state IN (0, 1);
  CREATE INDEX deliveries_critical ON deliveries (recipient, channel) WHERE state = 0 AND priority = 1;
  -- Eviction's question (the oldest normal pending delivery of a recipient) from a partial index
  -- that holds open rows only, in place of one over every delivery ever made: the indexes a
  -- write maintains stay small however long the history.
  DROP INDEX deliveries_by_recipient;
  CREATE INDEX deliveries_oldest_normal ON deliveries (recipient, id) WHERE state = 0 AND priority = 0;
  ALTER TABLE dead_letters ADD COLUMN note TEXT;
  `,
  // 3: storage bounds. Each message keeps what it counts against its sender's share (`size`:
  // its stored bytes plus the measured cost of its row, its index entries and its deliveries,
  // MESSAGE_OVERHEAD_BYTES and DELIVERY_OVERHEAD_BYTES in rules/storage.ts), and the totals per
  // sender are kept in step in the same transactions, so that an adapter starts by reading a
  // handful of rows rather than summing every message (1.2 s for 200,000 messages, 1 GB).
  `
  ALTER TABLE messages ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
  UPDATE messages SET size = octet_length(body) + 256
    + 128 * (SELECT count(*) FROM deliveries d WHERE d.message = messages.id);
  CREATE TABLE sender_usage (
    sender TEXT PRIMARY KEY,
    bytes  INTEGER NOT NULL
  ) WITHOUT ROWID;
  INSERT INTO sender_usage (sender, bytes) SELECT sender, sum(size) FROM messages GROUP BY sender;
  `,
  // 4: threads and their budgets (docs/design/threads.md). A reply keeps its thread's id and its
  // hop; a message that starts a thread keeps NULL (its thread is its own message_id) and hop 0,
  // so the rows already stored are roots as they are: adding the columns rewrites no row (a
  // rewrite of every body would need as much free space again as the store holds, up to 4 GiB
  // on a 5 GiB volume), and the thread index holds replies only, so a plain send never touches
  // it. Their stored JSON, written before, lacks thread_id and hop: readers get them spliced in
  // (sqlite-threads.ts, withThreadFields). One row per thread that has replies: its messages of
  // agents since the last continuation, the root counted. Budget alerts are aggregated per
  // (thread, reason) in alert_state, `recipient` holding the thread's id, with the sender of
  // the latest refusal.
  `
  ALTER TABLE messages ADD COLUMN thread_id TEXT;
  ALTER TABLE messages ADD COLUMN hop INTEGER NOT NULL DEFAULT 0;
  CREATE INDEX messages_by_thread ON messages (thread_id, id) WHERE thread_id IS NOT NULL;
  CREATE TABLE threads (
    thread_id TEXT PRIMARY KEY,
    count     INTEGER NOT NULL, -- messages of agents since the last continuation
    last_at   INTEGER NOT NULL  -- the latest message's receipt time, ms: retention's clock
  ) WITHOUT ROWID;
  ALTER TABLE alert_state ADD COLUMN sender TEXT;
  `,
  // 5: the foreign key check of every delivery retention deletes. SQLite enforces foreign keys
  // here (better-sqlite3 turns them on), and deleting a delivery looks for dead letters that
  // still name it: without an index on dead_letters (delivery) that is a scan of every dead
  // letter for each delivery pruned, so a batch of 200 messages to five agents with 10,000 dead
  // letters stored held the loop for about 300 ms (1,000 messages: 1.5 s; with the index 14 ms).
  // The PostgreSQL store has had this index from its first migration.
  `
  CREATE INDEX IF NOT EXISTS dead_letters_by_delivery ON dead_letters (delivery);
  `,
  // 6: two b-tree pages fewer in the WAL of every send's commit (12 a lone send before, 10
  // after; docs/design/durability.md, "Pages per commit").
  // - The retry timer's index holds the deliveries waiting out a retry's backoff only. Every new
  //   delivery is pending and ready at once, so an index over all pending rows took an entry
  //   from every delivery made and dropped it at its lease. Only a failed attempt makes a
  //   pending row wait (retryLater), and a hand-out has counted it in attempt first, so
  //   attempt > 0 holds for every row nextAvailable can find.
  // - The senders' totals (sender_usage) are written back at most once a second and with every
  //   prune, no longer in every commit: usage_mark says which messages they count (ids up to
  //   as_of), and an open adds the messages after it (storage-budget.ts).
  `
  DROP INDEX IF EXISTS deliveries_waiting;
  CREATE INDEX IF NOT EXISTS deliveries_retrying ON deliveries (available_at)
    WHERE state = 0 AND attempt > 0;
  CREATE TABLE IF NOT EXISTS usage_mark (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    as_of INTEGER NOT NULL -- sender_usage counts the messages with id <= as_of
  );
  INSERT OR REPLACE INTO usage_mark (one, as_of) SELECT 1, coalesce(max(id), 0) FROM messages;
  `,
  // 7: alert/budget aggregated per sender, not per thread: a budget row's
  // `recipient` is now the sender refused and its `sender` column the latest thread. The rows
  // kept per thread are folded into one per (sender, reason): their counts waiting added up,
  // the latest window kept, the ids they listed dropped (the count still has them).
  `
  CREATE TEMP TABLE budget_rows AS
    SELECT sender AS recipient, reason, kind, max(last_sent_at) AS last_sent_at,
           sum(count) AS count, '[]' AS message_ids, 0 AS attempts, max(recipient) AS sender
    FROM alert_state
    WHERE reason IN ('hop_budget_exceeded', 'thread_budget_exceeded') AND sender IS NOT NULL
    GROUP BY 1, 2;
  DELETE FROM alert_state WHERE reason IN ('hop_budget_exceeded', 'thread_budget_exceeded');
  INSERT INTO alert_state (recipient, reason, kind, last_sent_at, count, message_ids, attempts,
                           sender)
    SELECT recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender
    FROM budget_rows;
  DROP TABLE budget_rows;
  `,
  // 8: a message's journey (docs/design/journey.md). One row per change of a delivery, written
  // in the transaction of the change: leased (attempt, lease end, replica), lease_extended,
  // lease_expired, nacked, acked, evicted, dead_lettered, redriven. A copy's `queued` is its
  // message's commit and has no row: the send path writes nothing more. Read by message, and
  // deleted with it by retention. Each agent's last poll, for the journey's `last_poll`.
  `
  CREATE TABLE IF NOT EXISTS delivery_events (
    id        INTEGER PRIMARY KEY,
    message   INTEGER NOT NULL,
    delivery  INTEGER NOT NULL,
    recipient TEXT NOT NULL,
    at        INTEGER NOT NULL, -- ms since the epoch
    event     TEXT NOT NULL,
    attempt   INTEGER NOT NULL,
    detail    TEXT -- JSON, or NULL
  );
  CREATE INDEX IF NOT EXISTS delivery_events_by_message ON delivery_events (message, id);
  CREATE TABLE IF NOT EXISTS agent_polls (
    agent     TEXT PRIMARY KEY,
    last_poll INTEGER NOT NULL -- ms since the epoch
  ) WITHOUT ROWID;
  `,
  // 9: operators (docs/design/operators.md). Pauses and resumes of an agent's deliveries (the
  // last row of an agent says whether it is paused); bulk redrives with their cursor and counts;
  // the audit log, a hash chain; full-text search over each message's payload text and kind
  // (contentless FTS5: the first 4,096 characters of the text, rules/storage.ts
  // SEARCH_TEXT_CHARS; filled after the commit by indexForSearch, emptied with the message by
  // a trigger); the open dead
  // letters (not replayed) by recipient and in message order, for counts, filters and redrives.
  `
  CREATE TABLE IF NOT EXISTS agent_pauses (
    id    INTEGER PRIMARY KEY,
    agent TEXT    NOT NULL,
    at    INTEGER NOT NULL, -- ms since the epoch
    event TEXT    NOT NULL, -- paused, resumed
    by    TEXT    NOT NULL
  );
  CREATE INDEX IF NOT EXISTS agent_pauses_by_agent ON agent_pauses (agent, id);
  CREATE TABLE IF NOT EXISTS redrives (
    id             TEXT    PRIMARY KEY,
    created_at     INTEGER NOT NULL,
    by             TEXT    NOT NULL,
    selection      TEXT    NOT NULL, -- JSON: {"ids": [...]} or {"filter": {...}}
    max_dead       INTEGER NOT NULL, -- the highest dead letter id when it was made
    rate           INTEGER NOT NULL,
    total          INTEGER NOT NULL,
    done           INTEGER NOT NULL DEFAULT 0,
    skipped        INTEGER NOT NULL DEFAULT 0,
    state          TEXT    NOT NULL DEFAULT 'running',
    cursor_message INTEGER NOT NULL DEFAULT 0,
    cursor_dead    INTEGER NOT NULL DEFAULT 0
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS audit_log (
    seq       INTEGER PRIMARY KEY,
    at        INTEGER NOT NULL,
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    target    TEXT    NOT NULL,
    detail    TEXT    NOT NULL,
    prev_hash TEXT    NOT NULL,
    hash      TEXT    NOT NULL
  );
  CREATE INDEX IF NOT EXISTS dead_letters_open_by_recipient ON dead_letters (recipient)
    WHERE replay_delivery IS NULL;
  CREATE INDEX IF NOT EXISTS dead_letters_open_by_message ON dead_letters (message, id)
    WHERE replay_delivery IS NULL;
  CREATE VIRTUAL TABLE IF NOT EXISTS message_text USING fts5 (
    body, kind, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
  );
  -- the last message indexed: the index is kept off the commit path (sqlite-operators.ts)
  CREATE TABLE IF NOT EXISTS message_text_mark (last_message INTEGER NOT NULL);
  INSERT INTO message_text_mark (last_message)
    SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM message_text_mark);
  -- the messages stored before it count what the index adds to them, as new ones do
  -- (rules/storage.ts searchIndexBytes), and their senders' totals with them
  UPDATE messages SET size = size + length(kind) + CASE WHEN json_valid(body)
    THEN min(length(coalesce(json_extract(body, '$.payload'), '')), 4096) ELSE 0 END;
  DELETE FROM sender_usage;
  INSERT INTO sender_usage (sender, bytes) SELECT sender, sum(size) FROM messages GROUP BY sender;
  UPDATE usage_mark SET as_of = (SELECT coalesce(max(id), 0) FROM messages);
  CREATE TRIGGER IF NOT EXISTS message_text_delete AFTER DELETE ON messages BEGIN
    DELETE FROM message_text WHERE rowid = old.id;
  END;
  `,
  // 10: time in the envelope and asking (docs/design/time.md). A copy's deadline (ms; NULL:
  // none), indexed while pending, so the due timer finds the next one in one step; the message a
  // reply answers (its message_id), indexed where set, so an ask finds its reply in two probes;
  // scheduled messages wait in a table of their own until they fire (then they enter messages,
  // with their sequence, in the transaction that deletes them here). A cancelled one stays, so
  // its key stays taken.
  `
  ALTER TABLE deliveries ADD COLUMN expires_at INTEGER;
  CREATE INDEX IF NOT EXISTS deliveries_expiring ON deliveries (expires_at)
    WHERE state = 0 AND expires_at IS NOT NULL;
  ALTER TABLE messages ADD COLUMN reply_to_id TEXT;
  CREATE INDEX IF NOT EXISTS messages_by_reply_to ON messages (reply_to_id)
    WHERE reply_to_id IS NOT NULL;
  CREATE TABLE IF NOT EXISTS scheduled (
    id              INTEGER PRIMARY KEY,
    message_id      TEXT    NOT NULL UNIQUE,
    sender          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL,
    channel         TEXT    NOT NULL,
    received_at     INTEGER NOT NULL, -- ms since the epoch: its timestamp_iso8601
    deliver_at      INTEGER NOT NULL, -- ms since the epoch
    cancelled_at    INTEGER,          -- set by its sender's DELETE; NULL: still to fire
    draft           TEXT    NOT NULL  -- JSON: what firing needs (rules/scheduled.ts)
  );
  CREATE UNIQUE INDEX IF NOT EXISTS scheduled_by_sender_key ON scheduled (sender, idempotency_key);
  CREATE INDEX IF NOT EXISTS scheduled_due ON scheduled (deliver_at, id) WHERE cancelled_at IS NULL;
  CREATE INDEX IF NOT EXISTS scheduled_by_received_at ON scheduled (received_at);
  `,
  // 11: the audit log's anchor (docs/design/operators.md, "The anchor"; rules/audit-chain.ts),
  // one row beside the log, written in the transaction of every append and every prune: the
  // newest entry's seq and hash (an append numbers its entry from it, so a seq is never given
  // twice), and the highest seq retention pruned with that entry's hash (what the first kept
  // entry holds as prev_hash). Set from the log as this migration finds it: an existing log is
  // trusted as found. Run again over a file that has it (its version put back), it changes
  // nothing.
  `
  CREATE TABLE IF NOT EXISTS audit_anchor (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    seq         INTEGER NOT NULL,
    hash        TEXT    NOT NULL,
    pruned_seq  INTEGER NOT NULL,
    pruned_hash TEXT    NOT NULL
  );
  INSERT INTO audit_anchor (id, seq, hash, pruned_seq, pruned_hash)
    SELECT 1,
      coalesce((SELECT seq FROM audit_log ORDER BY seq DESC LIMIT 1), 0),
      coalesce((SELECT hash FROM audit_log ORDER BY seq DESC LIMIT 1), '${GENESIS_HASH}'),
      coalesce((SELECT seq - 1 FROM audit_log ORDER BY seq LIMIT 1), 0),
      coalesce((SELECT prev_hash FROM audit_log ORDER BY seq LIMIT 1), '${GENESIS_HASH}')
    WHERE NOT EXISTS (SELECT 1 FROM audit_anchor);
  `,
];

/** The schema version from which a store keeps the audit log's anchor (migration 11). */
export const AUDIT_ANCHOR_VERSION = 11;

export const SQL = {
  ensureChannel: 'INSERT INTO channels (name) VALUES (?) ON CONFLICT (name) DO NOTHING',
  nextSeq: 'UPDATE channels SET last_seq = last_seq + 1 WHERE name = ? RETURNING last_seq',
  findByKey: `
    SELECT message_id, channel, seq, received_at, fingerprint,
           coalesce(thread_id, message_id) AS thread_id, hop
    FROM messages WHERE sender = ? AND idempotency_key = ?`,
  insertMessage: `
    INSERT INTO messages
      (message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
       received_at, body, checksum, size, thread_id, hop, reply_to_id)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  channelMessages: `
    SELECT id, seq, body, checksum FROM messages WHERE channel = ? AND seq > ? ORDER BY seq LIMIT ?`,
  // the same, without the rows known to fail their checksum (a JSON array of row ids): used only
  // once one was found, so the common read keeps its plain plan
  channelMessagesIntact: `
    SELECT id, seq, body, checksum FROM messages
    WHERE channel = ? AND seq > ? AND id NOT IN (SELECT value FROM json_each(?))
    ORDER BY seq LIMIT ?`,
  messageBody: 'SELECT id, body, checksum FROM messages WHERE id = ?',
  // what an alert about a corrupt row names: columns of their own, not the checksummed body
  messageWhere: 'SELECT message_id, channel FROM messages WHERE id = ?',
  // the reader's own deliveries of a replay page's messages (same window as channelMessages)
  pageDeliveries: `
    SELECT m.message_id, d.state
    FROM (SELECT id, message_id FROM messages WHERE channel = ? AND seq > ? ORDER BY seq LIMIT ?) m
    JOIN deliveries d ON d.message = m.id
    WHERE d.recipient = ? ORDER BY d.id`,
  pageDeliveriesIntact: `
    SELECT m.message_id, d.state
    FROM (SELECT id, message_id FROM messages
          WHERE channel = ? AND seq > ? AND id NOT IN (SELECT value FROM json_each(?))
          ORDER BY seq LIMIT ?) m
    JOIN deliveries d ON d.message = m.id
    WHERE d.recipient = ? ORDER BY d.id`,
  // a message_id is a UUIDv7 of the receipt time: found through the received_at index, so no
  // index of its own costs every append (GET /v1/messages/{message_id})
  messageById: `
    SELECT id, body, checksum, sender FROM messages WHERE received_at = ? AND message_id = ?`,
  // each delivery of a message, oldest first, with its dead letter's reason and note if any
  recipients: `
    SELECT d.recipient, d.state, d.attempt, dl.reason, dl.note
    FROM deliveries d LEFT JOIN dead_letters dl ON dl.delivery = d.id
    WHERE d.message = ? ORDER BY d.id`,

  // deliveries
  insertDelivery: `
    INSERT INTO deliveries (message, recipient, channel, priority, state, available_at, expires_at)
    VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
  queueDepths: `
    SELECT recipient, count(*) AS depth, sum(priority) AS critical
    FROM deliveries WHERE state IN (0, 1) GROUP BY recipient`,
  // The oldest normal pending delivery of a recipient from one sender: the one a full queue
  // evicts (queue-shares.ts evictionSender), walking the oldest-normal index in id order.
  oldestNormalPendingOf: `
    SELECT d.id, d.message, d.recipient, d.attempt, d.priority FROM deliveries d
    JOIN messages m ON m.id = d.message
    WHERE d.recipient = ? AND d.state = 0 AND d.priority = 0 AND m.sender = ?
    ORDER BY d.id LIMIT 1`,
  // Each sender's part of a recipient's open deliveries (queue-shares.ts Holding): read only
  // when the queue is full or a sender nears its critical share, from the lanes index.
  queueHoldings: `
    SELECT m.sender AS sender, count(*) AS open, sum(d.priority) AS critical,
           sum(d.state = 0 AND d.priority = 0) AS evictable
    FROM deliveries d JOIN messages m ON m.id = d.message
    WHERE d.recipient = ? AND d.state IN (0, 1) GROUP BY m.sender`,
  // The lanes of one agent whose first open delivery is ready (pending, backoff over): only
  // these may be served, so nothing of a channel overtakes an earlier delivery that is leased or
  // waiting for its retry. Lanes holding a critical pending delivery first, then by their head.
  // The heads come from the lanes index alone (no row is read but each head's).
  readyLanes: `
    SELECT h.channel, h.head,
      EXISTS (SELECT 1 FROM deliveries c
              WHERE c.recipient = @agent AND c.channel = h.channel AND c.state = 0 AND c.priority = 1)
        AS critical
    FROM (SELECT channel, min(id) AS head FROM deliveries
          WHERE recipient = @agent AND state IN (0, 1) GROUP BY channel) h
    JOIN deliveries d ON d.id = h.head
    WHERE d.state = 0 AND d.available_at <= @now AND (d.expires_at IS NULL OR d.expires_at > @now)
    ORDER BY critical DESC, h.head`,
  // One lane from its head on, in order: served up to the first that is not ready.
  lane: `
    SELECT id, message, state, available_at, expires_at FROM deliveries
    WHERE recipient = ? AND channel = ? AND state IN (0, 1) AND id >= ? ORDER BY id LIMIT ?`,
  lease: `
    UPDATE deliveries SET state = 1, attempt = attempt + 1, lease_expires_at = ?
    WHERE id = ? RETURNING attempt, message, recipient`,
  delivery: `
    SELECT id, message, recipient, state, attempt, priority, lease_expires_at, expires_at
    FROM deliveries WHERE id = ?`,
  extendLease: 'UPDATE deliveries SET lease_expires_at = ? WHERE id = ?',
  setState: 'UPDATE deliveries SET state = ?, lease_expires_at = NULL WHERE id = ?',
  retryLater: `
    UPDATE deliveries SET state = 0, available_at = ?, lease_expires_at = NULL WHERE id = ?`,
  expiredLeases: `
    SELECT id, message, recipient, state, attempt, priority, expires_at FROM deliveries
    WHERE state = 1 AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT ?`,
  // pending copies past their deadline (deliveries_expiring), and the next deadline
  expiredPending: `
    SELECT id, message, recipient, state, attempt, priority, expires_at FROM deliveries
    WHERE state = 0 AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?`,
  nextExpiry: `
    SELECT min(expires_at) FROM deliveries WHERE state = 0 AND expires_at IS NOT NULL`,
  nextLeaseExpiry: 'SELECT min(lease_expires_at) FROM deliveries WHERE state = 1',
  // a pending row waits only for a retry, after a hand-out (attempt > 0): deliveries_retrying
  nextAvailable: `
    SELECT min(available_at) FROM deliveries
    WHERE state = 0 AND attempt > 0 AND available_at > ?`,
  messageKind: 'SELECT kind, message_id FROM messages WHERE id = ?',
  insertDeadLetter: `
    INSERT INTO dead_letters (delivery, message, recipient, reason, attempts, created_at, note)
    VALUES (?, ?, ?, ?, ?, ?, ?)`,
  deadLetter: `
    SELECT dl.id, dl.message, dl.recipient, dl.replay_delivery, m.priority, m.message_id,
           m.channel, d.expires_at
    FROM dead_letters dl JOIN messages m ON m.id = dl.message
    LEFT JOIN deliveries d ON d.id = dl.delivery WHERE dl.id = ?`,
  markReplayed: 'UPDATE dead_letters SET replay_delivery = ? WHERE id = ?',

  // operators (docs/design/operators.md)
  insertPause: 'INSERT INTO agent_pauses (agent, at, event, by) VALUES (?, ?, ?, ?)',
  // each agent's last pause row, when it is a pause: the agents paused now
  pausedNow: `
    SELECT p.agent, p.at, p.by FROM agent_pauses p
    WHERE p.id = (SELECT max(id) FROM agent_pauses q WHERE q.agent = p.agent) AND p.event = 'paused'`,
  pausesSince: `
    SELECT agent, at, event, by FROM agent_pauses WHERE at >= ? ORDER BY id`,
  agentCounts: `
    SELECT count(*) FILTER (WHERE state = 0) AS pending,
           count(*) FILTER (WHERE state = 0 AND priority = 1) AS critical_pending,
           count(*) FILTER (WHERE state = 1) AS leased
    FROM deliveries WHERE recipient = ? AND state IN (0, 1)`,
  openDeadLetters: `
    SELECT count(*) FROM dead_letters WHERE recipient = ? AND replay_delivery IS NULL`,
  lastPolls: 'SELECT agent, last_poll FROM agent_polls',
  lastSequences: 'SELECT name, last_seq FROM channels',
  maxDeadLetter: 'SELECT coalesce(max(id), 0) FROM dead_letters',
  insertRedrive: `
    INSERT INTO redrives (id, created_at, by, selection, max_dead, rate, total)
    VALUES (?, ?, ?, ?, ?, ?, ?)`,
  redrive: 'SELECT * FROM redrives WHERE id = ?',
  runningRedrives: "SELECT id FROM redrives WHERE state = 'running' ORDER BY created_at",
  redriveProgress: `
    UPDATE redrives SET done = ?, skipped = ?, state = ?, cursor_message = ?, cursor_dead = ?
    WHERE id = ?`,
  // search: the messages after the mark, up to a bound, into the index; then the mark moved
  searchMark: 'SELECT last_message FROM message_text_mark',
  indexMessages: `
    INSERT INTO message_text (rowid, body, kind)
    SELECT id,
           -- a body that is not JSON (a row damaged on disk) is indexed by its kind alone
           CASE WHEN json_valid(body) THEN
             substr((SELECT group_concat(value, ' ') FROM json_tree(body, '$.payload')
                     WHERE type = 'text'), 1, 4096)
           END,
           kind
    FROM messages WHERE id > ? ORDER BY id LIMIT ?`,
  lastOfBatch: `
    SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)`,
  moveSearchMark: 'UPDATE message_text_mark SET last_message = ?',
  lastMessage: 'SELECT coalesce(max(id), 0) FROM messages',
  /**
   * The audit log's end as an append needs it, one row always: the last entry's seq and hash,
   * and the anchor's (NULL: no such row).
   */
  auditEnd: `
    SELECT l.seq AS last_seq, l.hash AS last_hash, a.seq AS anchor_seq, a.hash AS anchor_hash
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) AS l ON 1
    LEFT JOIN audit_anchor AS a ON a.id = 1`,
  insertAudit: `
    INSERT INTO audit_log (seq, at, actor, action, target, detail, prev_hash, hash)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  /** The anchor after an append: the newest entry. */
  moveAuditAnchor: 'UPDATE audit_anchor SET seq = ?, hash = ? WHERE id = 1',
  auditAnchor: 'SELECT seq, hash, pruned_seq, pruned_hash FROM audit_anchor WHERE id = 1',
  audit: `
    SELECT seq, at, actor, action, target, detail, prev_hash, hash FROM audit_log
    WHERE seq > ? ORDER BY seq LIMIT ?`,
  /**
   * Retention of the audit log: up to a batch of the oldest entries, those before the first
   * entry (in seq order) at or after the horizon, never the newest one, so the chain goes on
   * from it. In seq order, not by `at`: an entry whose clock ran behind (another replica's) is
   * not taken from the middle. The horizon's entry is found by walking the primary key from the
   * start: the entries pruned and one more. Answers the entries pruned (seq, hash), for the
   * anchor (pruneAuditAnchor).
   */
  pruneAudit: `
    DELETE FROM audit_log WHERE seq IN (
      SELECT seq FROM audit_log
      WHERE seq < coalesce(
        (SELECT seq FROM audit_log WHERE at >= ? ORDER BY seq LIMIT 1),
        (SELECT max(seq) FROM audit_log))
      ORDER BY seq LIMIT ?)
    RETURNING seq, hash`,
  /** The anchor after a prune: the last entry pruned (never moved back). */
  pruneAuditAnchor: `
    UPDATE audit_anchor SET pruned_seq = ?, pruned_hash = ? WHERE id = 1 AND pruned_seq < ?`,
  touchAgent: `
    INSERT INTO agents (id, last_seen) VALUES (?, ?)
    ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen`,
  agents: 'SELECT id, last_seen FROM agents',
  touchPoll: `
    INSERT INTO agent_polls (agent, last_poll) VALUES (?, ?)
    ON CONFLICT (agent) DO UPDATE SET last_poll = excluded.last_poll`,

  // a message's journey (docs/design/journey.md)
  insertEvent: `
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    VALUES (?, ?, ?, ?, ?, ?, ?)`,
  journeyEvents: `
    SELECT recipient, delivery, at, event, attempt, detail FROM delivery_events
    WHERE message = ? ORDER BY id`,
  // each recipient's latest copy of a message (a replayed dead letter makes another)
  journeyCopies: `
    SELECT d.id, d.recipient, d.channel, d.state, d.attempt, d.available_at, d.lease_expires_at,
           dl.reason, dl.note, dl.created_at AS dead_at, a.last_poll
    FROM deliveries d
    LEFT JOIN dead_letters dl ON dl.delivery = d.id
    LEFT JOIN agent_polls a ON a.agent = d.recipient
    WHERE d.message = ? AND d.id = (SELECT max(id) FROM deliveries
                                    WHERE message = d.message AND recipient = d.recipient)
    ORDER BY d.id`,
  // the head of a recipient's lane in a channel: its first open delivery
  laneHead: `
    SELECT d.id, d.message, d.state, d.attempt, d.available_at, d.lease_expires_at,
           m.message_id, m.seq, m.kind, m.sender
    FROM deliveries d JOIN messages m ON m.id = d.message
    WHERE d.recipient = ? AND d.channel = ? AND d.state IN (0, 1) ORDER BY d.id LIMIT 1`,
  // when a delivery was last leased (for the sentence "leased since")
  lastLeased: `
    SELECT at FROM delivery_events WHERE message = ? AND delivery = ? AND event = 'leased'
    ORDER BY id DESC LIMIT 1`,
  openDeliveries: `
    SELECT count(*) FROM deliveries WHERE recipient = ? AND state IN (0, 1)`,
  // The stall check's read, per agent: the first-arrived pending delivery, normal (from
  // deliveries_oldest_normal) or critical (deliveries_critical), and when it was ready. ~9 µs an
  // agent with 1,000 pending; a GROUP BY over every pending row took 64 ms at 100,000.
  oldestPendingAt: `
    SELECT available_at FROM deliveries WHERE id = min(
      coalesce((SELECT id FROM deliveries WHERE recipient = @agent AND state = 0 AND priority = 0
                ORDER BY id LIMIT 1), 9e18),
      coalesce((SELECT min(id) FROM deliveries WHERE recipient = @agent AND state = 0
                AND priority = 1), 9e18))`,

  // threads (sqlite-threads.ts): the message a reply names, by message_id (through the
  // received_at index, as messageById) or by its channel's sequence; what it can see of it
  replyById: `
    SELECT id, message_id, channel, sender, coalesce(thread_id, message_id) AS thread_id, hop
    FROM messages WHERE received_at = ? AND message_id = ?`,
  replyBySeq: `
    SELECT id, message_id, channel, sender, coalesce(thread_id, message_id) AS thread_id, hop
    FROM messages WHERE channel = ? AND seq = ?`,
  hadDelivery: 'SELECT 1 FROM deliveries WHERE message = ? AND recipient = ? LIMIT 1',
  threadCount: 'SELECT count FROM threads WHERE thread_id = ?',
  countThread: `
    INSERT INTO threads (thread_id, count, last_at) VALUES (?, ?, ?)
    ON CONFLICT (thread_id) DO UPDATE SET count = excluded.count, last_at = excluded.last_at`,
  // a thread's messages in commit order: its root (the lowest id of the thread, since every
  // reply names a message stored before it), then its replies from the thread index
  threadRoot: `
    SELECT id, body, checksum FROM messages
    WHERE received_at = ? AND message_id = ? AND thread_id IS NULL AND id > ?`,
  threadReplies: `
    SELECT id, body, checksum FROM messages WHERE thread_id = ? AND id > ? ORDER BY id LIMIT ?`,
  // threads quiet for the retention period (a scan of the small table, hourly)
  pruneThreads: `
    DELETE FROM threads WHERE thread_id IN (SELECT thread_id FROM threads WHERE last_at < ? LIMIT ?)`,

  // asking (sqlite-replies.ts, docs/design/time.md "Asking"): who sent the asked message
  // (through the received_at index, as messageById), or, not fired yet, the scheduled one; the
  // reply's first copy held by the asker, from messages_by_reply_to then deliveries_by_message
  messageSender: 'SELECT sender FROM messages WHERE received_at = ? AND message_id = ?',
  scheduledSender: 'SELECT sender FROM scheduled WHERE message_id = ?',
  replyCopy: `
    SELECT d.id, d.message, d.recipient, d.state, d.attempt, d.priority, d.lease_expires_at,
           d.expires_at, m.body, m.checksum
    FROM messages m CROSS JOIN deliveries d
    WHERE m.reply_to_id = ? AND d.message = m.id AND d.recipient = ?
    ORDER BY d.id LIMIT 1`,

  // alerts
  alertState: 'SELECT * FROM alert_state WHERE recipient = ? AND reason = ?',
  upsertAlert: `
    INSERT INTO alert_state
      (recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (recipient, reason) DO UPDATE SET
      kind = excluded.kind, last_sent_at = excluded.last_sent_at, count = excluded.count,
      message_ids = excluded.message_ids, attempts = excluded.attempts, sender = excluded.sender`,
  dueAlerts: 'SELECT * FROM alert_state WHERE count > 0 AND last_sent_at <= ?',
  nextAlertDue: 'SELECT min(last_sent_at) FROM alert_state WHERE count > 0',

  // retention: old messages no delivery still waits for, contracts excepted
  prunable: `
    SELECT m.id, m.sender, m.size FROM messages m
    WHERE m.received_at < ? AND m.kind NOT IN (SELECT value FROM json_each(?))
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message = m.id AND d.state IN (0, 1))
    ORDER BY m.received_at LIMIT ?`,
  pruneDeadLetters: 'DELETE FROM dead_letters WHERE message = ?',
  pruneDeliveries: 'DELETE FROM deliveries WHERE message = ?',
  pruneDeliveryEvents: 'DELETE FROM delivery_events WHERE message = ?',
  pruneMessage: 'DELETE FROM messages WHERE id = ?',

  // storage bounds (storage-budget.ts)
  senderUsage: 'SELECT sender, bytes FROM sender_usage',
  usageMark: 'SELECT as_of FROM usage_mark',
  setUsageMark: 'UPDATE usage_mark SET as_of = (SELECT coalesce(max(id), 0) FROM messages)',
  usageAfter: 'SELECT sender, sum(size) AS bytes FROM messages WHERE id > ? GROUP BY sender',
  setSenderUsage: `
    INSERT INTO sender_usage (sender, bytes) VALUES (?, ?)
    ON CONFLICT (sender) DO UPDATE SET bytes = excluded.bytes`,
  pageCount: 'PRAGMA page_count',
  freelistCount: 'PRAGMA freelist_count',
  pageSize: 'PRAGMA page_size',

  // scheduled messages (docs/design/time.md): by key, as findByKey answers; written at send;
  // the due ones in order; the next due; a cancel; cancelled ones pruned with their age
  findScheduledByKey: `
    SELECT message_id, channel, NULL AS seq, received_at, fingerprint, deliver_at,
           coalesce(json_extract(draft, '$.threadId'), message_id) AS thread_id,
           json_extract(draft, '$.hop') AS hop
    FROM scheduled WHERE sender = ? AND idempotency_key = ?`,
  insertScheduled: `
    INSERT INTO scheduled
      (message_id, sender, idempotency_key, fingerprint, channel, received_at, deliver_at, draft)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  dueScheduled: `
    SELECT id, message_id, sender, idempotency_key, fingerprint, channel, received_at,
           deliver_at, draft
    FROM scheduled WHERE cancelled_at IS NULL AND deliver_at <= ? ORDER BY deliver_at, id LIMIT ?`,
  deleteScheduled: 'DELETE FROM scheduled WHERE id = ?',
  nextScheduled: 'SELECT min(deliver_at) FROM scheduled WHERE cancelled_at IS NULL',
  scheduledById: `
    SELECT id, message_id, sender, idempotency_key, fingerprint, channel, received_at,
           deliver_at, cancelled_at, draft
    FROM scheduled WHERE message_id = ?`,
  cancelScheduled: 'UPDATE scheduled SET cancelled_at = ? WHERE id = ? AND cancelled_at IS NULL',
  pruneScheduled: 'DELETE FROM scheduled WHERE cancelled_at IS NOT NULL AND received_at < ?',
} as const;
