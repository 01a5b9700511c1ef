/**
 * Every SQL string of the PostgreSQL store, in one reviewable place: the numbered migrations
 * first, then the statements the store runs (prepared once per connection, by name). Times are
 * bigint ms since the epoch, as in SQLite; bigint columns are read as JS numbers (every value
 * here is below 2^53).
 */

import { GENESIS_HASH } from '../rules/operators.js';
import { JOURNEY_EVENT_BYTES } from '../rules/storage.js';

/** pg_advisory_lock keys (the two-int form: this program's namespace, then the lock). */
export const LOCK_NS = 0x61677700; // 'agw\0'
export const LOCK_MIGRATE = 1;
/** Held by the short transaction that folds alert events into alert_state and writes alerts. */
export const LOCK_ALERTS = 2;
/** Per thread (hashtext of its id): its reply budget, counted by one transaction at a time. */
export const LOCK_THREAD_NS = 0x61677701;
/** The audit log's end: entries are appended by one transaction at a time, so it stays one chain. */
export const LOCK_AUDIT = 3;

/** The channel the store announces its commits on, for the other replicas (LISTEN). */
export const WAKE_CHANNEL = 'agw_wake';

/**
 * Migration N brings the schema from version N-1 to N (agw_schema.version). Never edit a
 * migration that has shipped: add the next one.
 */
export const PG_MIGRATIONS: readonly string[] = [
  // 1: the whole schema of SQLite's migrations 1-4, plus what replicas need in rows rather than
  // in one process's memory: the queue depths and each sender's stored bytes (agents), and the
  // alert events raised by groups, folded into alert_state by one transaction at a time.
  `
  -- The per-channel counter: UPDATE ... RETURNING under the row lock held to COMMIT, so no
  -- gap and commit order = sequence order. Never an identity or serial column.
  CREATE TABLE channels (
    name     text PRIMARY KEY,
    last_seq bigint NOT NULL DEFAULT 0
  );

  -- One row per agent: the per-recipient lock row (leases, acks, enqueues of one agent are
  -- serialized by it), the queue depths the bounds read, and the stored bytes of its messages
  -- as a sender (NULL: it never sent one), changed under that row's lock only.
  CREATE TABLE agents (
    id           text PRIMARY KEY,
    last_seen    bigint,
    depth        integer NOT NULL DEFAULT 0,
    critical     integer NOT NULL DEFAULT 0,
    stored_bytes bigint
  );

  CREATE TABLE messages (
    id              bigserial PRIMARY KEY,
    message_id      text     NOT NULL,
    channel         text     NOT NULL,
    seq             bigint   NOT NULL,
    sender          text     NOT NULL,
    idempotency_key text     NOT NULL,
    fingerprint     bytea    NOT NULL,
    kind            text     NOT NULL,
    priority        smallint NOT NULL,
    received_at     bigint   NOT NULL,
    body            text     NOT NULL,
    checksum        bigint   NOT NULL, -- CRC-32 of body, checked at every read
    size            bigint   NOT NULL, -- what it counts against its sender's share
    thread_id       text,              -- NULL: it started its own thread
    hop             integer  NOT NULL DEFAULT 0
  );
  -- Stored as written, not compressed: the size bound counts what the database holds, and
  -- every read checks the checksum of the whole body anyway.
  ALTER TABLE messages ALTER COLUMN body SET STORAGE EXTERNAL;
  CREATE UNIQUE INDEX messages_by_channel_seq ON messages (channel, seq);
  CREATE UNIQUE INDEX messages_by_sender_key ON messages (sender, idempotency_key);
  CREATE INDEX messages_by_received_at ON messages (received_at);
  CREATE INDEX messages_by_thread ON messages (thread_id, id) WHERE thread_id IS NOT NULL;

  -- state: 0 pending, 1 leased, 2 acked, 3 dead-lettered (store.ts DeliveryState)
  CREATE TABLE deliveries (
    id               bigserial PRIMARY KEY,
    message          bigint   NOT NULL,
    recipient        text     NOT NULL,
    channel          text     NOT NULL,
    priority         smallint NOT NULL,
    state            smallint NOT NULL DEFAULT 0,
    attempt          integer  NOT NULL DEFAULT 0,
    available_at     bigint   NOT NULL,
    lease_expires_at bigint
  );
  CREATE INDEX deliveries_by_message ON deliveries (message);
  CREATE INDEX deliveries_leased ON deliveries (lease_expires_at) WHERE state = 1;
  CREATE INDEX deliveries_waiting ON deliveries (available_at) WHERE state = 0;
  CREATE INDEX deliveries_lanes ON deliveries (recipient, channel, id) WHERE state IN (0, 1);
  CREATE INDEX deliveries_critical ON deliveries (recipient, channel) WHERE state = 0 AND priority = 1;
  CREATE INDEX deliveries_oldest_normal ON deliveries (recipient, id) WHERE state = 0 AND priority = 0;

  CREATE TABLE dead_letters (
    id              bigserial PRIMARY KEY,
    delivery        bigint  NOT NULL,
    message         bigint  NOT NULL,
    recipient       text    NOT NULL,
    reason          text    NOT NULL,
    attempts        integer NOT NULL,
    created_at      bigint  NOT NULL,
    replay_delivery bigint,
    note            text
  );
  CREATE INDEX dead_letters_by_message ON dead_letters (message);
  CREATE INDEX dead_letters_by_delivery ON dead_letters (delivery);

  CREATE TABLE threads (
    thread_id text    PRIMARY KEY,
    count     integer NOT NULL,
    last_at   bigint  NOT NULL
  );

  CREATE TABLE alert_state (
    recipient    text    NOT NULL,
    reason       text    NOT NULL,
    kind         text    NOT NULL,
    last_sent_at bigint  NOT NULL DEFAULT 0,
    count        integer NOT NULL DEFAULT 0,
    message_ids  text    NOT NULL DEFAULT '[]',
    attempts     integer NOT NULL DEFAULT 0,
    sender       text,
    PRIMARY KEY (recipient, reason)
  );

  -- Append-only: a group that raises an alert inserts a row (no lock shared between
  -- transactions); the alerts transaction folds them into alert_state, in id order.
  CREATE TABLE alert_events (
    id         bigserial PRIMARY KEY,
    recipient  text    NOT NULL,
    reason     text    NOT NULL,
    message_id text,
    attempts   integer NOT NULL,
    at         bigint  NOT NULL,
    count      integer NOT NULL,
    sender     text
  );
  `,
  // 2: alert/budget aggregated per sender, not per thread (SQLite's migration 7): a
  // budget row's and event's `recipient` is now the sender refused and `sender` the thread.
  `
  CREATE TEMP TABLE budget_rows ON COMMIT DROP AS
    SELECT sender AS recipient, reason, min(kind) AS kind, max(last_sent_at) AS last_sent_at,
           sum(count)::integer AS count, '[]'::text AS message_ids, 0 AS attempts,
           max(recipient) AS sender
    FROM alert_state
    WHERE reason IN ('hop_budget_exceeded', 'thread_budget_exceeded') AND sender IS NOT NULL
    GROUP BY 1, 2;
  DELETE FROM alert_state WHERE reason IN ('hop_budget_exceeded', 'thread_budget_exceeded');
  INSERT INTO alert_state (recipient, reason, kind, last_sent_at, count, message_ids, attempts,
                           sender)
    SELECT recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender
    FROM budget_rows;
  UPDATE alert_events SET recipient = sender, sender = recipient
    WHERE reason IN ('hop_budget_exceeded', 'thread_budget_exceeded') AND sender IS NOT NULL;
  `,
  // 3: a message's journey (docs/design/journey.md; SQLite's migration 8). One row per change
  // of a delivery, written in the transaction of the change (by its statement, or pg-tx.ts
  // journeyEvent): leased, lease_extended, lease_expired, nacked, acked, evicted, dead_lettered,
  // redriven. A copy's `queued` is its message's commit and has no row. Read by message, and
  // deleted with it by retention. Each agent's last poll, for the journey's `last_poll`. IF NOT EXISTS: it runs
  // again on a schema whose version was put back (test/store/budget-alert-migration.test.ts).
  `
  -- Keyed by (message, id), the order the journey reads and retention deletes them in: one
  -- index to write per event, where a key on id and an index by message would be two.
  CREATE TABLE IF NOT EXISTS delivery_events (
    id        bigserial,
    message   bigint  NOT NULL,
    delivery  bigint  NOT NULL,
    recipient text    NOT NULL,
    at        bigint  NOT NULL,
    event     text    NOT NULL,
    attempt   integer NOT NULL,
    detail    text, -- JSON as written, or NULL: text, not jsonb, so it reads back byte for byte
    PRIMARY KEY (message, id)
  );
  CREATE TABLE IF NOT EXISTS agent_polls (
    agent     text PRIMARY KEY,
    last_poll bigint NOT NULL
  );
  `,
  // 4: operators (docs/design/operators.md; SQLite's migration 9). An agent paused now is its
  // agents row's paused_at/paused_by, read under the row lock every lease takes, so every
  // replica sees a pause at its next lease; agent_pauses keeps each pause and resume for the
  // journeys. Bulk redrives with their cursor and counts; the audit log, a hash chain appended
  // under LOCK_AUDIT. The open dead letters (not replayed) by recipient and in message order.
  // Full-text search over each message's payload strings and kind, with the words split as
  // SQLite's FTS5 (unicode61, remove_diacritics 2) and rules/operators.ts wordsOf split them:
  // runs of letters and digits, diacritics removed, lower-cased. PostgreSQL's own parser alone
  // would keep "example.com", "a@b.org" or "v1.2" as one word, which SQLite splits, so the two
  // stores would answer one query differently. A body that is not JSON (a corrupt row) is
  // indexed by its kind alone.
  `
  ALTER TABLE agents ADD COLUMN IF NOT EXISTS paused_at bigint;
  ALTER TABLE agents ADD COLUMN IF NOT EXISTS paused_by text;
  CREATE TABLE IF NOT EXISTS agent_pauses (
    id    bigserial PRIMARY KEY,
    agent text   NOT NULL,
    at    bigint NOT NULL, -- ms since the epoch
    event text   NOT NULL, -- paused, resumed
    by    text   NOT NULL
  );
  CREATE INDEX IF NOT EXISTS agent_pauses_by_at ON agent_pauses (at);
  CREATE TABLE IF NOT EXISTS redrives (
    id             text    PRIMARY KEY,
    created_at     bigint  NOT NULL,
    by             text    NOT NULL,
    selection      text    NOT NULL, -- JSON: {"ids": [...]} or {"filter": {...}}
    max_dead       bigint  NOT NULL, -- the highest dead letter id when it was made
    rate           integer NOT NULL,
    total          integer NOT NULL,
    done           integer NOT NULL DEFAULT 0,
    skipped        integer NOT NULL DEFAULT 0,
    state          text    NOT NULL DEFAULT 'running',
    cursor_message bigint  NOT NULL DEFAULT 0,
    cursor_dead    bigint  NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS audit_log (
    seq       bigint PRIMARY KEY,
    at        bigint NOT NULL,
    actor     text   NOT NULL,
    action    text   NOT NULL,
    target    text   NOT NULL,
    detail    text   NOT NULL, -- JSON as hashed
    prev_hash text   NOT NULL,
    hash      text   NOT NULL
  );
  CREATE INDEX IF NOT EXISTS dead_letters_open_by_recipient ON dead_letters (recipient)
    WHERE replay_delivery IS NULL;
  CREATE INDEX IF NOT EXISTS dead_letters_open_by_message ON dead_letters (message, id)
    WHERE replay_delivery IS NULL;
  -- text as searched: diacritics removed (NFD, then the combining marks dropped; only in a
  -- UTF8 database, the only one normalize() works in), every run of anything but letters and
  -- digits a space. A database's encoding never changes, so the function stays immutable.
  CREATE OR REPLACE FUNCTION agw_search_text(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $f$
      SELECT regexp_replace(
               CASE WHEN current_setting('server_encoding') = 'UTF8'
                    THEN regexp_replace(normalize(t, NFD), '[\\u0300-\\u036f]+', '', 'g')
                    ELSE t END,
               '[^[:alnum:]]+', ' ', 'g')
    $f$;
  CREATE OR REPLACE FUNCTION agw_search_vector(body text, kind text) RETURNS tsvector
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $f$
    DECLARE
      words text;
    BEGIN
      BEGIN
        SELECT string_agg(v #>> '{}', ' ') INTO words
        FROM jsonb_path_query(body::jsonb -> 'payload', 'strict $.**') v
        WHERE jsonb_typeof(v) = 'string';
        RETURN to_tsvector('simple', agw_search_text(concat_ws(' ', words, kind)));
      EXCEPTION WHEN others THEN
        -- not JSON (a corrupt row), or more words than a tsvector holds (1 MiB)
        RETURN to_tsvector('simple', coalesce(agw_search_text(kind), ''));
      END;
    END
    $f$;
  CREATE INDEX IF NOT EXISTS messages_text ON messages USING gin (agw_search_vector(body, kind));
  `,
  // 5: time in the envelope and asking (docs/design/time.md; SQLite's migration 10): a copy's
  // deadline, the message a reply answers, scheduled messages until they fire.
  `
  ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS expires_at bigint;
  CREATE INDEX IF NOT EXISTS deliveries_expiring ON deliveries (expires_at)
    WHERE state = 0 AND expires_at IS NOT NULL;
  ALTER TABLE messages ADD COLUMN IF NOT EXISTS reply_to_id text;
  CREATE INDEX IF NOT EXISTS messages_by_reply_to ON messages (reply_to_id)
    WHERE reply_to_id IS NOT NULL;
  CREATE TABLE IF NOT EXISTS scheduled (
    id              bigserial PRIMARY KEY,
    message_id      text   NOT NULL UNIQUE,
    sender          text   NOT NULL,
    idempotency_key text   NOT NULL,
    fingerprint     bytea  NOT NULL,
    channel         text   NOT NULL,
    received_at     bigint NOT NULL,
    deliver_at      bigint NOT NULL,
    cancelled_at    bigint,
    draft           text   NOT NULL
  );
  CREATE UNIQUE INDEX IF NOT EXISTS scheduled_by_sender_key ON scheduled (sender, idempotency_key);
  CREATE INDEX IF NOT EXISTS scheduled_due ON scheduled (deliver_at, id) WHERE cancelled_at IS NULL;
  CREATE INDEX IF NOT EXISTS scheduled_by_received_at ON scheduled (received_at);
  `,
  // 6: the audit log's anchor (docs/design/operators.md, "The anchor"; SQLite's migration 11),
  // one row beside the log, written under LOCK_AUDIT in the transaction of every append and
  // every prune: the newest entry's seq and hash (an append numbers its entry from it, so a seq
  // is never given twice), and the highest seq retention pruned with that entry's hash (what the
  // first kept entry holds as prev_hash). Set from the log as this migration finds it (under
  // LOCK_AUDIT: no append of a replica already running goes in between): an existing log is
  // trusted as found. Run again over a schema that has it, it changes nothing.
  `
  CREATE TABLE IF NOT EXISTS audit_anchor (
    id          smallint PRIMARY KEY CHECK (id = 1),
    seq         bigint NOT NULL,
    hash        text   NOT NULL,
    pruned_seq  bigint NOT NULL,
    pruned_hash text   NOT NULL
  );
  SELECT pg_advisory_xact_lock(${LOCK_NS}, ${LOCK_AUDIT});
  INSERT INTO audit_anchor (id, seq, hash, pruned_seq, pruned_hash)
    SELECT 1,
      coalesce((SELECT seq FROM audit_log ORDER BY seq DESC LIMIT 1), 0),
      coalesce((SELECT hash FROM audit_log ORDER BY seq DESC LIMIT 1), '${GENESIS_HASH}'),
      coalesce((SELECT seq - 1 FROM audit_log ORDER BY seq LIMIT 1), 0),
      coalesce((SELECT prev_hash FROM audit_log ORDER BY seq LIMIT 1), '${GENESIS_HASH}')
  ON CONFLICT (id) DO NOTHING;
  `,
];

/** The schema version from which a store keeps the audit log's anchor (migration 6). */
export const PG_AUDIT_ANCHOR_VERSION = 6;

/** Delivery columns most statements read (d), with their message's kind and id (m). */
const DELIVERY_ROW =
  'd.id, d.message, d.recipient, d.state, d.attempt, d.priority, d.lease_expires_at, d.expires_at, m.kind, m.message_id';

export const PG_SQL = {
  // schema
  createSchemaTable: 'CREATE TABLE IF NOT EXISTS agw_schema (version integer NOT NULL)',
  schemaVersion: 'SELECT max(version) AS version FROM agw_schema',
  setSchemaVersion: 'INSERT INTO agw_schema (version) VALUES ($1)',
  migrateLock: `SELECT pg_advisory_lock(${LOCK_NS}, ${LOCK_MIGRATE})`,
  migrateUnlock: `SELECT pg_advisory_unlock(${LOCK_NS}, ${LOCK_MIGRATE})`,

  ensureChannels: `
    INSERT INTO channels (name) SELECT n FROM unnest($1::text[]) n ORDER BY n
    ON CONFLICT (name) DO NOTHING`,

  // the locks a group takes first, in this order (docs/design/postgres.md)
  /** The counters, locked to COMMIT: numbers are given in memory and written back by finish. */
  lockChannels: `
    SELECT name, last_seq FROM channels WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE`,
  ensureAgents: `
    INSERT INTO agents (id) SELECT a FROM unnest($1::text[]) a ORDER BY a
    ON CONFLICT (id) DO NOTHING`,
  lockAgents: `
    SELECT id, depth, critical, stored_bytes, paused_at, paused_by FROM agents
    WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`,
  lockAgentsSkip: `
    SELECT id, depth, critical, stored_bytes, paused_at, paused_by FROM agents
    WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE SKIP LOCKED`,
  lockThreads: `
    SELECT pg_advisory_xact_lock(${LOCK_THREAD_NS}, k)
    FROM (SELECT DISTINCT hashtext(t) AS k FROM unnest($1::text[]) t ORDER BY k) s`,
  lockAlerts: `SELECT pg_advisory_xact_lock(${LOCK_NS}, ${LOCK_ALERTS})`,
  lockAudit: `SELECT pg_advisory_xact_lock(${LOCK_NS}, ${LOCK_AUDIT})`,
  /** The redrives a group steps, sorted, locked first: a step at a time across replicas. */
  lockRedrives: 'SELECT * FROM redrives WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE',

  /**
   * The end of every transaction, one round trip: the agents rows it changed (depths, stored
   * bytes, last_seen), the alert events it raised, and its announcement to the other replicas
   * (delivered at COMMIT; NULL: none).
   */
  finish: `
    WITH a AS (
      UPDATE agents g SET depth = u.depth, critical = u.critical,
        stored_bytes = u.bytes, last_seen = coalesce(u.seen, g.last_seen)
      FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[], $5::bigint[])
        AS u(id, depth, critical, bytes, seen)
      WHERE g.id = u.id
    ), c AS (
      UPDATE channels ch SET last_seq = u.last
      FROM unnest($14::text[], $15::bigint[]) AS u(name, last) WHERE ch.name = u.name
    ), e AS (
      INSERT INTO alert_events (recipient, reason, message_id, attempts, at, count, sender)
      SELECT * FROM unnest($6::text[], $7::text[], $8::text[], $9::int[], $10::bigint[],
                           $11::int[], $12::text[])
    )
    SELECT CASE WHEN $13::text IS NULL THEN NULL ELSE pg_notify('${WAKE_CHANNEL}', $13::text) END`,

  /**
   * The stored messages of these (sender, key) pairs, read once the senders' rows are locked:
   * no other transaction can store a key of theirs before this one commits.
   */
  findKeys: `
    SELECT sender, idempotency_key, message_id, channel, seq, received_at, fingerprint,
           coalesce(thread_id, message_id) AS thread_id, hop, NULL::bigint AS deliver_at
    FROM messages
    WHERE (sender, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
    UNION ALL
    SELECT sender, idempotency_key, message_id, channel, NULL, received_at, fingerprint,
           coalesce(draft::jsonb ->> 'threadId', message_id), (draft::jsonb ->> 'hop')::int,
           deliver_at
    FROM scheduled
    WHERE (sender, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
  /** A key stored, or scheduled (not fired yet, or cancelled): the key is taken either way. */
  findByKey: `
    SELECT 1 FROM messages WHERE sender = $1 AND idempotency_key = $2
    UNION ALL SELECT 1 FROM scheduled WHERE sender = $1 AND idempotency_key = $2 LIMIT 1`,
  messageIdByKey: `
    SELECT message_id FROM messages WHERE sender = $1 AND idempotency_key = $2
    UNION ALL
    SELECT message_id FROM scheduled WHERE sender = $1 AND idempotency_key = $2 LIMIT 1`,
  /**
   * Messages (in the order given), their deliveries (in the order given: each message's in
   * recipient order, pending or, for a queue_full copy, dead; made at $19, the message's receipt
   * or, for a scheduled one, its firing; with the deadline $20), and the dead letters of those
   * copies with their journey's event (an admitted copy has none: its `queued` is the message's
   * commit): one statement for the appends of a group, which answers nothing (it is sent without
   * waiting). The ids are drawn as it runs, in those orders (nextval is evaluated above the
   * sort), after the group's locks, so inside a channel they follow sequence order.
   */
  insertMessages: `
    WITH m AS (
      INSERT INTO messages
        (message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
         received_at, body, checksum, size, thread_id, hop, reply_to_id)
      SELECT message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
             received_at, body, checksum, size, thread_id, hop, reply_to_id
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bytea[],
                  $7::text[], $8::smallint[], $9::bigint[], $10::text[], $11::bigint[],
                  $12::bigint[], $13::text[], $14::int[], $15::text[])
        WITH ORDINALITY AS u(message_id, channel, seq, sender, idempotency_key, fingerprint,
                             kind, priority, received_at, body, checksum, size, thread_id, hop,
                             reply_to_id, n)
      ORDER BY n
      RETURNING id, message_id, channel, priority, received_at
    ), d AS (
      INSERT INTO deliveries
        (message, recipient, channel, priority, state, available_at, expires_at)
      SELECT m.id, r.recipient, m.channel, m.priority, r.state, r.at, r.expires_at
      FROM unnest($16::text[], $17::text[], $18::smallint[], $19::bigint[], $20::bigint[])
        WITH ORDINALITY AS r(message_id, recipient, state, at, expires_at, n)
      JOIN m ON m.message_id = r.message_id
      ORDER BY r.n
      RETURNING id, message, recipient, state, available_at
    ), dl AS (
      INSERT INTO dead_letters (delivery, message, recipient, reason, attempts, created_at)
      SELECT id, message, recipient, 'queue_full', 0, available_at FROM d WHERE state = 3
      ORDER BY id
    )
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    SELECT message, id, recipient, available_at, 'dead_lettered', 0,
           '{"reason":"queue_full","note":null}'
    FROM d WHERE state = 3 ORDER BY id`,
  /** A replayed copy, and its dead letter if it is dead at once (queue_full). */
  insertDelivery: `
    WITH d AS (
      INSERT INTO deliveries
        (message, recipient, channel, priority, state, available_at, expires_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, message, recipient, state
    ), dl AS (
      INSERT INTO dead_letters (delivery, message, recipient, reason, attempts, created_at)
      SELECT id, message, recipient, 'queue_full', 0, $6 FROM d WHERE state = 3
    )
    SELECT id FROM d`,

  // reads
  // At most $4 rows, and no more of them than reach $5 bytes (octet_length(body) + $6 each, the
  // first always): octet_length reads a stored body's length, not the body, so rows past the
  // page's byte bound are never fetched.
  channelMessages: `
    SELECT id, seq, body, checksum FROM (
      SELECT id, seq, body, checksum,
        sum(octet_length(body) + $6::int) OVER (ORDER BY seq) - octet_length(body) - $6::int AS before
      FROM (SELECT id, seq, body, checksum FROM messages
            WHERE channel = $1 AND seq > $2 AND id <> ALL($3::bigint[]) ORDER BY seq LIMIT $4) m
    ) w WHERE before < $5::bigint ORDER BY seq`,
  pageDeliveries: `
    SELECT m.message_id, d.state
    FROM (SELECT id, message_id FROM messages
          WHERE channel = $1 AND seq > $2 AND id <> ALL($3::bigint[]) ORDER BY seq LIMIT $4) m
    JOIN deliveries d ON d.message = m.id
    WHERE d.recipient = $5 ORDER BY d.id`,
  messageWhere: 'SELECT id, message_id, channel FROM messages WHERE id = ANY($1::bigint[])',
  messageById: `
    SELECT id, body, checksum, sender FROM messages WHERE received_at = $1 AND message_id = $2`,
  recipients: `
    SELECT d.recipient, d.state, d.attempt, dl.reason, dl.note
    FROM deliveries d LEFT JOIN dead_letters dl ON dl.delivery = d.id
    WHERE d.message = $1 ORDER BY d.id, dl.id`,
  agents: 'SELECT id, last_seen, depth, critical FROM agents WHERE id = ANY($1::text[])',
  depth: 'SELECT depth, critical FROM agents WHERE id = $1',
  senders: 'SELECT id, stored_bytes FROM agents WHERE stored_bytes IS NOT NULL',
  /**
   * The store's size for its bound: every sender's stored messages (each by its size,
   * rules/storage.ts messageSize) plus the journey's events (JOURNEY_EVENT_BYTES each, written on
   * the receive path and so attributed to no sender). The events are counted from the server's
   * statistics, which go down when retention deletes them (a relation's size on disk never
   * does): the live rows, flushed by each server backend within seconds; and not below the
   * count the last vacuum or analyze saw, so a server crash, which resets the statistics, does
   * not make them uncounted (docs/design/postgres.md, "Storage bounds").
   */
  storedBytes: `
    SELECT ((SELECT coalesce(sum(stored_bytes), 0) FROM agents)
      + (SELECT greatest(coalesce(s.n_live_tup, 0), c.reltuples, 0)
         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
         WHERE c.oid = 'delivery_events'::regclass) * ${JOURNEY_EVENT_BYTES})::bigint AS used`,
  oldestPendingAt: `
    SELECT available_at FROM deliveries WHERE id = least(
      (SELECT id FROM deliveries WHERE recipient = $1 AND state = 0 AND priority = 0
       ORDER BY id LIMIT 1),
      (SELECT min(id) FROM deliveries WHERE recipient = $1 AND state = 0 AND priority = 1))`,
  nextDue: `
    SELECT least(
      (SELECT min(lease_expires_at) FROM deliveries WHERE state = 1),
      (SELECT min(available_at) FROM deliveries WHERE state = 0 AND available_at > $1),
      (SELECT min(last_sent_at) + $2 FROM alert_state WHERE count > 0),
      (SELECT min(at) FROM alert_events),
      (SELECT min(expires_at) FROM deliveries WHERE state = 0 AND expires_at IS NOT NULL),
      (SELECT min(deliver_at) FROM scheduled WHERE cancelled_at IS NULL)) AS due`,

  // the safety poll's question (store.ts readyAmong): of the agents $1, those with a pending
  // delivery ready at $2; one probe of deliveries_lanes per agent (the planner proves state = 0
  // within its state IN (0, 1)), stopped at the first row
  readyAmong: `
    SELECT a.agent FROM unnest($1::text[]) AS a (agent)
    WHERE EXISTS (
      SELECT 1 FROM deliveries d
      WHERE d.recipient = a.agent AND d.state = 0 AND d.available_at <= $2
        AND (d.expires_at IS NULL OR d.expires_at > $2))`,

  // deliveries
  /**
   * The $3 oldest normal pending deliveries of agent $1 from sender $2: the next to evict, in
   * order (queue-shares.ts evictionSender chose the sender).
   */
  oldestNormalPendingOf: `
    SELECT ${DELIVERY_ROW}
    FROM deliveries d JOIN messages m ON m.id = d.message
    WHERE d.recipient = $1 AND d.state = 0 AND d.priority = 0 AND m.sender = $2
    ORDER BY d.id LIMIT $3`,
  /**
   * Each sender's part of agent $1's open deliveries (queue-shares.ts Holding): read when its
   * queue is full or a sender nears its critical share (SQLite's queueHoldings).
   */
  queueHoldings: `
    SELECT m.sender, count(*)::int AS open, sum(d.priority)::int AS critical,
           (count(*) FILTER (WHERE d.state = 0 AND d.priority = 0))::int AS evictable
    FROM deliveries d JOIN messages m ON m.id = d.message
    WHERE d.recipient = $1 AND d.state IN (0, 1) GROUP BY m.sender`,
  /**
   * Up to $3 deliveries of one agent that may be handed out now ($2), in hand-out order, with
   * their messages: the lanes whose first open delivery is ready, critical lanes first, then
   * by their head (SQLite's readyLanes), each served from its head up to its first delivery
   * that is leased, waiting for a retry or past its deadline (the sweep dead-letters it).
   */
  readyLanes: `
    WITH RECURSIVE h AS (
      -- the head of each lane: one probe of deliveries_lanes per channel, not a scan of the
      -- whole queue
      (SELECT channel, id, state, available_at, expires_at FROM deliveries
       WHERE recipient = $1 AND state IN (0, 1) ORDER BY channel, id LIMIT 1)
      UNION ALL
      SELECT n.channel, n.id, n.state, n.available_at, n.expires_at FROM h CROSS JOIN LATERAL (
        SELECT channel, id, state, available_at, expires_at FROM deliveries
        WHERE recipient = $1 AND state IN (0, 1) AND channel > h.channel
        ORDER BY channel, id LIMIT 1) n
    ), r AS (
      SELECT h.channel, h.id AS head,
        EXISTS (SELECT 1 FROM deliveries c WHERE c.recipient = $1 AND c.channel = h.channel
                AND c.state = 0 AND c.priority = 1) AS critical
      FROM h WHERE h.state = 0 AND h.available_at <= $2
        AND (h.expires_at IS NULL OR h.expires_at > $2)
    ), l AS (
      SELECT r.critical, r.head, l.id, l.message, l.attempt
      FROM r CROSS JOIN LATERAL (
        SELECT q.id, q.message, q.attempt,
          bool_and(q.state = 0 AND q.available_at <= $2
                   AND (q.expires_at IS NULL OR q.expires_at > $2)) OVER (ORDER BY q.id) AS ready
        FROM (SELECT id, message, attempt, state, available_at, expires_at FROM deliveries
              WHERE recipient = $1 AND channel = r.channel AND state IN (0, 1) AND id >= r.head
              ORDER BY id LIMIT $3) q) l
      WHERE l.ready
      ORDER BY r.critical DESC, r.head, l.id
      LIMIT $3
    )
    SELECT l.id, l.message, l.attempt, m.body, m.checksum
    FROM l JOIN messages m ON m.id = l.message
    ORDER BY l.critical DESC, l.head, l.id`,
  /**
   * The leases, each with its journey's event ($3 the time, $4 the detail), as ackAll and
   * extendLeases write theirs: an event made from the row the statement changes cost 3 µs a
   * delivery in leases of 200, against 8 µs sent as arrays in an INSERT of its own (pg-tx.ts
   * journeyEvent, kept for the rarer changes).
   */
  lease: `
    WITH l AS (
      UPDATE deliveries SET state = 1, attempt = attempt + 1, lease_expires_at = $1
      WHERE id = ANY($2::bigint[]) RETURNING id, message, recipient, attempt
    )
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    SELECT message, id, recipient, $3, 'leased', attempt, $4 FROM l ORDER BY id`,
  deliveries: `
    SELECT ${DELIVERY_ROW} FROM deliveries d LEFT JOIN messages m ON m.id = d.message
    WHERE d.id = ANY($1::bigint[])`,
  extendLeases: `
    WITH x AS (
      UPDATE deliveries SET lease_expires_at = $1 WHERE id = ANY($2::bigint[])
      RETURNING id, message, recipient, attempt
    )
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    SELECT message, id, recipient, $3, 'lease_extended', attempt, $4 FROM x ORDER BY id`,
  ackAll: `
    WITH a AS (
      UPDATE deliveries SET state = 2, lease_expires_at = NULL WHERE id = ANY($1::bigint[])
      RETURNING id, message, recipient, attempt
    )
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    SELECT message, id, recipient, $2, 'acked', attempt, NULL FROM a ORDER BY id`,
  retryLater: `
    UPDATE deliveries d SET state = 0, available_at = u.at, lease_expires_at = NULL
    FROM unnest($1::bigint[], $2::bigint[]) AS u(id, at) WHERE d.id = u.id`,
  /** A dead letter: the delivery's state (if still open) and its row. */
  deadLetter: `
    WITH s AS (
      UPDATE deliveries SET state = 3, lease_expires_at = NULL WHERE id = $1 AND $8::boolean
    )
    INSERT INTO dead_letters (delivery, message, recipient, reason, attempts, created_at, note)
    VALUES ($1, $2, $3, $4, $5, $6, $7)`,
  expiredLeases: `
    SELECT id, recipient FROM deliveries
    WHERE state = 1 AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2`,
  /** Pending copies past their deadline (deliveries_expiring): candidates, read unlocked. */
  expiredPending: `
    SELECT id, recipient FROM deliveries
    WHERE state = 0 AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2`,
  /** The candidates again, under their agents' locks: still pending and past their deadline. */
  expiredPendingLocked: `
    SELECT ${DELIVERY_ROW} FROM deliveries d LEFT JOIN messages m ON m.id = d.message
    WHERE d.id = ANY($1::bigint[]) AND d.recipient = ANY($2::text[]) AND d.state = 0
      AND d.expires_at <= $3
    ORDER BY d.expires_at, d.id`,
  /** The candidates again, under their agents' locks: still leased and expired. */
  expiredLocked: `
    SELECT ${DELIVERY_ROW} FROM deliveries d LEFT JOIN messages m ON m.id = d.message
    WHERE d.id = ANY($1::bigint[]) AND d.recipient = ANY($2::text[]) AND d.state = 1
      AND d.lease_expires_at <= $3
    ORDER BY d.lease_expires_at, d.id`,
  deadLetterOne: `
    SELECT dl.id, dl.message, dl.recipient, dl.replay_delivery, m.priority, m.message_id,
           m.channel, m.kind
    FROM dead_letters dl JOIN messages m ON m.id = dl.message WHERE dl.id = $1`,
  /** With the dead copy's deadline, which its replay keeps. */
  deadLetterLocked: `
    SELECT dl.id, dl.message, dl.recipient, dl.replay_delivery, m.priority, m.message_id,
           m.channel, m.kind, d.expires_at
    FROM dead_letters dl JOIN messages m ON m.id = dl.message
    LEFT JOIN deliveries d ON d.id = dl.delivery WHERE dl.id = $1
    FOR UPDATE OF dl`,
  markReplayed: 'UPDATE dead_letters SET replay_delivery = $1 WHERE id = $2',

  // operators (docs/design/operators.md; the statements built from a filter: pg-operators.ts)
  /** A pause or resume: the agents row (locked) and the journeys' row, one statement. */
  setPaused: `
    WITH a AS (UPDATE agents SET paused_at = $2, paused_by = $3 WHERE id = $1)
    INSERT INTO agent_pauses (agent, at, event, by) VALUES ($1, $4, $5, $6)`,
  // every agent's, as SQLite's: a journey reads its recipients' (pauses are an operator's acts,
  // a few rows)
  pausesSince: 'SELECT agent, at, event, by FROM agent_pauses WHERE at >= $1 ORDER BY id',
  pausedNow: 'SELECT id, paused_at, paused_by FROM agents WHERE paused_at IS NOT NULL',
  /** Each agent's state for GET /v1/agents: its row, counts, open dead letters, last poll. */
  agentStates: `
    SELECT u.id, a.last_seen, a.depth, a.critical, a.paused_at, a.paused_by, p.last_poll,
      (SELECT count(*) FROM deliveries d WHERE d.recipient = a.id AND d.state = 0)::int
        AS pending,
      (SELECT count(*) FROM deliveries d
       WHERE d.recipient = a.id AND d.state = 0 AND d.priority = 1)::int AS critical_pending,
      (SELECT count(*) FROM deliveries d WHERE d.recipient = a.id AND d.state = 1)::int
        AS leased,
      (SELECT count(*) FROM dead_letters dl
       WHERE dl.recipient = a.id AND dl.replay_delivery IS NULL)::int AS dead_letters
    FROM unnest($1::text[]) u(id)
    LEFT JOIN agents a ON a.id = u.id
    LEFT JOIN agent_polls p ON p.agent = u.id`,
  lastSequences: 'SELECT name, last_seq FROM channels',
  maxDeadLetter: 'SELECT coalesce(max(id), 0) AS max FROM dead_letters',
  insertRedrive: `
    INSERT INTO redrives (id, created_at, by, selection, max_dead, rate, total)
    VALUES ($1, $2, $3, $4, $5, $6, $7)`,
  redrive: 'SELECT * FROM redrives WHERE id = $1',
  runningRedrives: "SELECT id FROM redrives WHERE state = 'running' ORDER BY created_at, id",
  redriveProgress: `
    UPDATE redrives SET done = $1, skipped = $2, state = $3, cursor_message = $4,
      cursor_dead = $5
    WHERE id = $6`,
  /**
   * The audit log's end as an append needs it (LOCK_AUDIT held), one row always: the last
   * entry's seq and hash, and the anchor's (NULL: no such row).
   */
  auditEnd: `
    SELECT l.seq AS last_seq, l.hash AS last_hash, a.seq AS anchor_seq, a.hash AS anchor_hash
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) AS l ON true
    LEFT JOIN audit_anchor AS a ON a.id = 1`,
  insertAudit: `
    INSERT INTO audit_log (seq, at, actor, action, target, detail, prev_hash, hash)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  /** The anchor after an append: the newest entry. */
  moveAuditAnchor: 'UPDATE audit_anchor SET seq = $1, hash = $2 WHERE id = 1',
  auditAnchor: 'SELECT seq, hash, pruned_seq, pruned_hash FROM audit_anchor WHERE id = 1',
  audit: `
    SELECT seq, at, actor, action, target, detail, prev_hash, hash FROM audit_log
    WHERE seq > $1 ORDER BY seq LIMIT $2`,
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
        (SELECT seq FROM audit_log WHERE at >= $1 ORDER BY seq LIMIT 1),
        (SELECT max(seq) FROM audit_log))
      ORDER BY seq LIMIT $2)
    RETURNING seq, hash`,
  /** The anchor after a prune: the last entry pruned (never moved back). */
  pruneAuditAnchor: `
    UPDATE audit_anchor SET pruned_seq = $1, pruned_hash = $2 WHERE id = 1 AND pruned_seq < $1`,

  // a message's journey (docs/design/journey.md)
  /**
   * The events of the changes a transaction made by statements that write none of their own, in
   * the order they were made (pg-tx.ts journeyEvent).
   */
  insertEvents: `
    INSERT INTO delivery_events (message, delivery, recipient, at, event, attempt, detail)
    SELECT message, delivery, recipient, at, event, attempt, detail
    FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::int[],
                $7::text[])
      WITH ORDINALITY AS u(message, delivery, recipient, at, event, attempt, detail, n)
    ORDER BY n`,
  /**
   * The agents' last polls (their rows locked by the polls): never moved back, as a replica
   * whose clock is behind another's would otherwise do.
   */
  markPolls: `
    INSERT INTO agent_polls (agent, last_poll) SELECT * FROM unnest($1::text[], $2::bigint[])
    ON CONFLICT (agent) DO UPDATE
      SET last_poll = greatest(agent_polls.last_poll, excluded.last_poll)`,
  messageKey: 'SELECT id FROM messages WHERE received_at = $1 AND message_id = $2',
  journeyEvents: `
    SELECT recipient, delivery, at, event, attempt, detail FROM delivery_events
    WHERE message = $1 ORDER BY id`,
  // each recipient's latest copy of a message (a replayed dead letter makes another)
  journeyCopies: `
    SELECT d.id, d.recipient, d.channel, d.state, d.attempt, d.available_at, d.lease_expires_at,
           dl.reason, dl.note, dl.created_at AS dead_at, a.last_poll
    FROM deliveries d
    LEFT JOIN dead_letters dl ON dl.delivery = d.id
    LEFT JOIN agent_polls a ON a.agent = d.recipient
    WHERE d.message = $1 AND d.id = (SELECT max(id) FROM deliveries
                                     WHERE message = d.message AND recipient = d.recipient)
    ORDER BY d.id`,
  /** The head of a recipient's lane in a channel: its first open delivery. */
  laneHead: `
    SELECT d.id, d.message, d.state, d.attempt, d.available_at, d.lease_expires_at,
           m.message_id, m.seq, m.kind, m.sender
    FROM deliveries d JOIN messages m ON m.id = d.message
    WHERE d.recipient = $1 AND d.channel = $2 AND d.state IN (0, 1) ORDER BY d.id LIMIT 1`,
  /** When a delivery was last leased (for the sentence "leased since"). */
  lastLeased: `
    SELECT at FROM delivery_events WHERE message = $1 AND delivery = $2 AND event = 'leased'
    ORDER BY id DESC LIMIT 1`,

  // threads
  replyById: `
    SELECT id, message_id, channel, sender, coalesce(thread_id, message_id) AS thread_id, hop
    FROM messages WHERE received_at = $1 AND message_id = $2`,
  replyBySeq: `
    SELECT id, message_id, channel, sender, coalesce(thread_id, message_id) AS thread_id, hop
    FROM messages WHERE channel = $1 AND seq = $2`,
  hadDelivery: 'SELECT 1 FROM deliveries WHERE message = $1 AND recipient = $2 LIMIT 1',
  /** The counts of threads this transaction holds the locks of. */
  threadCounts: 'SELECT thread_id, count FROM threads WHERE thread_id = ANY($1::text[])',
  countThread: `
    INSERT INTO threads (thread_id, count, last_at) VALUES ($1, $2, $3)
    ON CONFLICT (thread_id) DO UPDATE SET count = excluded.count, last_at = excluded.last_at`,
  threadRoot: `
    SELECT id, body, checksum FROM messages
    WHERE received_at = $1 AND message_id = $2 AND thread_id IS NULL AND id > $3`,
  // as channelMessages: at most $3 rows, no more than reach $4 bytes ($5 more each)
  threadReplies: `
    SELECT id, body, checksum FROM (
      SELECT id, body, checksum,
        sum(octet_length(body) + $5::int) OVER (ORDER BY id) - octet_length(body) - $5::int AS before
      FROM (SELECT id, body, checksum FROM messages
            WHERE thread_id = $1 AND id > $2 ORDER BY id LIMIT $3) m
    ) w WHERE before < $4::bigint ORDER BY id`,
  pruneThreads: `
    DELETE FROM threads WHERE thread_id IN
      (SELECT thread_id FROM threads WHERE last_at < $1 LIMIT $2)`,

  // asking (pg-replies.ts, docs/design/time.md "Asking")
  /** Who sent the asked message (through the received_at index, as messageById). */
  messageSender: 'SELECT sender FROM messages WHERE received_at = $1 AND message_id = $2',
  /** Who scheduled it, while it has not fired. */
  scheduledSender: 'SELECT sender FROM scheduled WHERE message_id = $1',
  /**
   * The reply's first copy held by the asker (its row locked by the group): from
   * messages_by_reply_to, then deliveries_by_message.
   */
  replyCopy: `
    SELECT d.id, d.message, d.recipient, d.state, d.attempt, d.priority, d.lease_expires_at,
           d.expires_at, m.kind, m.message_id, m.body, m.checksum
    FROM messages m JOIN deliveries d ON d.message = m.id
    WHERE m.reply_to_id = $1 AND d.recipient = $2
    ORDER BY d.id LIMIT 1`,

  // scheduled messages (docs/design/time.md): written at send; the due ones, read unlocked,
  // then again under their channels' locks (which a cancel takes first too), in firing order;
  // sent: deleted; a cancel's row, read unlocked to lock its channel, then locked
  insertScheduled: `
    INSERT INTO scheduled
      (message_id, sender, idempotency_key, fingerprint, channel, received_at, deliver_at, draft)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  dueScheduled: `
    SELECT id, channel, sender, draft FROM scheduled
    WHERE cancelled_at IS NULL AND deliver_at <= $1 ORDER BY deliver_at, id LIMIT $2`,
  dueScheduledLocked: `
    SELECT id, message_id, sender, idempotency_key, fingerprint, channel, received_at,
           deliver_at, draft
    FROM scheduled WHERE id = ANY($1::bigint[]) AND cancelled_at IS NULL AND deliver_at <= $2
    ORDER BY deliver_at, id FOR UPDATE`,
  deleteScheduled: 'DELETE FROM scheduled WHERE id = ANY($1::bigint[])',
  scheduledById: `
    SELECT id, message_id, sender, idempotency_key, fingerprint, channel, received_at,
           deliver_at, cancelled_at, draft
    FROM scheduled WHERE message_id = $1`,
  scheduledLocked: `
    SELECT id, sender, cancelled_at FROM scheduled WHERE message_id = $1 FOR UPDATE`,
  cancelScheduled: 'UPDATE scheduled SET cancelled_at = $1 WHERE id = $2 AND cancelled_at IS NULL',

  // alerts
  takeEvents: `
    DELETE FROM alert_events
    RETURNING id, recipient, reason, message_id, attempts, at, count, sender`,
  alertStates: `
    SELECT recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender
    FROM alert_state
    WHERE (recipient, reason) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
  dueAlerts: `
    SELECT recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender
    FROM alert_state WHERE count > 0 AND last_sent_at <= $1`,
  saveAlerts: `
    INSERT INTO alert_state
      (recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::int[],
                         $6::text[], $7::int[], $8::text[])
    ON CONFLICT (recipient, reason) DO UPDATE SET
      kind = excluded.kind, last_sent_at = excluded.last_sent_at, count = excluded.count,
      message_ids = excluded.message_ids, attempts = excluded.attempts, sender = excluded.sender`,

  // retention
  prunable: `
    SELECT m.id, m.sender FROM messages m
    WHERE m.received_at < $1 AND m.kind <> ALL($2::text[])
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message = m.id AND d.state IN (0, 1))
    ORDER BY m.received_at LIMIT $3`,
  /** A replay of one of their dead letters waits for this, or this for it (then re-checked). */
  lockPrunableDeadLetters: `
    SELECT id FROM dead_letters WHERE message = ANY($1::bigint[]) ORDER BY id FOR UPDATE`,
  prunableLocked: `
    SELECT m.id, m.sender, m.size FROM messages m
    WHERE m.id = ANY($1::bigint[])
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message = m.id AND d.state IN (0, 1))`,
  /** Cancelled scheduled messages as old as the messages retention prunes. */
  pruneScheduled: `
    DELETE FROM scheduled WHERE id IN
      (SELECT id FROM scheduled WHERE cancelled_at IS NOT NULL AND received_at < $1 LIMIT $2)`,
  pruneMessages: `
    WITH dl AS (DELETE FROM dead_letters WHERE message = ANY($1::bigint[])),
         e AS (DELETE FROM delivery_events WHERE message = ANY($1::bigint[])),
         d AS (DELETE FROM deliveries WHERE message = ANY($1::bigint[]))
    DELETE FROM messages WHERE id = ANY($1::bigint[])`,
} as const;

export type PgStatement = keyof typeof PG_SQL;
