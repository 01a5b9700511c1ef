/**
 * `agent-gateway migrate-store`'s copy (docs/deploy.md, "Moving a SQLite adapter's data to
 * PostgreSQL"): a SQLite adapter's store, opened by sqlite/copy-source.ts, into an empty
 * PostgreSQL database. The database gets its schema from the PostgreSQL store's own migrations,
 * and everything is copied in one transaction: channels with their counters, messages with
 * every column and their ids, deliveries in their states, dead letters, agents (last contact,
 * and the queue depths and stored bytes the PostgreSQL schema keeps per agent, counted from the
 * copied rows), threads, the alert aggregation, the journeys' delivery events and last
 * polls, the operators' rows (pauses, with who is paused now; redrives; the audit log, its
 * hash chain as it is, and its anchor), and the scheduled messages still to fire or cancelled, with every copy's
 * deadline (docs/design/time.md). Then the id sequences are moved past the copied ids. The source is read through its handle only: no SQLite store file is imported.
 */
import type Database from 'better-sqlite3';
import pg from 'pg';
import { CopyRefusal } from '../copy-refusal.js';
import type { AlertRow } from '../rules/alert-rows.js';
import { PG_MIGRATIONS } from './pg-sql.js';

/** Rows per INSERT, and the body bytes after which a batch goes out sooner. */
const BATCH_ROWS = 1000;
const BATCH_BYTES = 16 * 1024 * 1024;

export interface CopyCounts {
  channels: number;
  messages: number;
  deliveries: number;
  deadLetters: number;
  agents: number;
  threads: number;
  alerts: number;
  events: number;
  polls: number;
  pauses: number;
  redrives: number;
  audit: number;
  scheduled: number;
}

/** The tables the copy writes, locked against every writer (other adapters) until COMMIT. */
const TABLES =
  'channels, agents, messages, deliveries, dead_letters, threads, alert_state, delivery_events, ' +
  'agent_polls, agent_pauses, redrives, audit_log, audit_anchor, scheduled';

/** Copies `source` into the empty database at `url`; the counts of what was copied. */
export async function copyFromSqlite(source: Database.Database, url: string): Promise<CopyCounts> {
  await createSchema(url);
  const client = new pg.Client({
    connectionString: url,
    application_name: 'agent-gateway migrate-store',
  });
  // a connection lost mid-copy rejects the query in flight; the event alone must not crash
  client.on('error', () => undefined);
  await client.connect();
  // one snapshot of the file for the whole copy
  source.exec('BEGIN');
  try {
    await client.query('BEGIN');
    // a 0 from the copy means the rows are on the standbys too, where replication is synchronous
    await client.query("SET LOCAL synchronous_commit = 'on'");
    await client.query("SET LOCAL lock_timeout = '30s'");
    await client.query(`LOCK TABLE ${TABLES} IN EXCLUSIVE MODE`);
    await refuseIfNotEmpty(client);
    const counts: CopyCounts = {
      channels: await copyChannels(source, client),
      messages: await copyMessages(source, client),
      deliveries: await copyDeliveries(source, client),
      deadLetters: await copyDeadLetters(source, client),
      agents: await copyAgents(source, client),
      threads: await copyThreads(source, client),
      alerts: await copyAlertState(source, client),
      events: await copyEvents(source, client),
      polls: await copyPolls(source, client),
      ...(await copyOperators(source, client)),
      scheduled: await copyScheduled(source, client),
    };
    for (const table of [
      'messages',
      'deliveries',
      'dead_letters',
      'delivery_events',
      'agent_pauses',
      'scheduled',
    ])
      await client.query(
        `SELECT setval(pg_get_serial_sequence('${table}', 'id'), max(id)) FROM ${table}
         HAVING max(id) IS NOT NULL`,
      );
    await client.query('COMMIT');
    return counts;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    source.exec('COMMIT');
    await client.end().catch(() => undefined);
  }
}

/**
 * The schema as the PostgreSQL store makes it: its own migrations, run by opening it (under its
 * advisory lock, so adapters starting at the same time wait), then closed again.
 */
async function createSchema(url: string): Promise<void> {
  const { openPgStore } = await import('./pg-store.js');
  const store = await openPgStore(url, {});
  await store.close();
}

async function refuseIfNotEmpty(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ version: number | null; used: boolean }>(`
    SELECT (SELECT max(version) FROM agw_schema) AS version,
           EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM deliveries)
             OR EXISTS (SELECT 1 FROM dead_letters)
             OR EXISTS (SELECT 1 FROM channels WHERE last_seq > 0)
             -- an operator's acts on an adapter already running on it: ids and the audit
             -- log's chain would collide with the copied ones
             OR EXISTS (SELECT 1 FROM agent_pauses) OR EXISTS (SELECT 1 FROM redrives)
             OR EXISTS (SELECT 1 FROM audit_log) OR EXISTS (SELECT 1 FROM scheduled)
             -- entries appended once, though none is left
             OR EXISTS (SELECT 1 FROM audit_anchor WHERE seq > 0) AS used`);
  const [{ version, used }] = rows as [{ version: number | null; used: boolean }];
  if (version !== PG_MIGRATIONS.length)
    throw new CopyRefusal(
      `the database is at schema version ${version}, not this program's ${PG_MIGRATIONS.length}`,
    );
  if (used)
    throw new CopyRefusal(
      'the database already holds messages: migrate-store copies into an empty one only',
    );
}

/** Rows of a table in id order, a batch at a time (keyset: each query starts after the last). */
function* batches<R extends { id: number }>(
  source: Database.Database,
  sql: string,
  bytesOf: (r: R) => number = () => 0,
): Generator<R[]> {
  const page = source.prepare<[number, number], R>(sql);
  let after = -1;
  let pending: R[] = [];
  let bytes = 0;
  for (;;) {
    const rows = page.all(after, BATCH_ROWS);
    if (rows.length === 0) break;
    for (const r of rows) {
      pending.push(r);
      bytes += bytesOf(r);
      if (pending.length >= BATCH_ROWS || bytes >= BATCH_BYTES) {
        yield pending;
        pending = [];
        bytes = 0;
      }
    }
    after = rows.at(-1)!.id;
  }
  if (pending.length > 0) yield pending;
}

const column = <R, K extends keyof R>(rows: readonly R[], k: K): R[K][] => rows.map((r) => r[k]);

async function copyChannels(source: Database.Database, client: pg.Client): Promise<number> {
  const rows = source
    .prepare<[], { name: string; last_seq: number }>('SELECT name, last_seq FROM channels')
    .all();
  // rows an adapter made at start (last_seq 0, nothing stored) take the file's counters
  await client.query(
    `INSERT INTO channels (name, last_seq) SELECT * FROM unnest($1::text[], $2::bigint[])
     ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq`,
    [column(rows, 'name'), column(rows, 'last_seq')],
  );
  return rows.length;
}

interface MessageRow {
  id: number;
  message_id: string;
  channel: string;
  seq: number;
  sender: string;
  idempotency_key: string;
  fingerprint: Buffer;
  kind: string;
  priority: number;
  received_at: number;
  body: string;
  checksum: number;
  size: number;
  thread_id: string | null;
  hop: number;
  /** The message it answers (an ask finds its reply by it), null: none. */
  reply_to_id: string | null;
}

async function copyMessages(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<MessageRow>(
    source,
    `SELECT id, message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
            received_at, body, checksum, size, thread_id, hop, reply_to_id
     FROM messages WHERE id > ? ORDER BY id LIMIT ?`,
    (r) => r.body.length,
  )) {
    await client.query(
      `INSERT INTO messages (id, message_id, channel, seq, sender, idempotency_key, fingerprint,
         kind, priority, received_at, body, checksum, size, thread_id, hop, reply_to_id)
       SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[],
         $6::text[], $7::bytea[], $8::text[], $9::smallint[], $10::bigint[], $11::text[],
         $12::bigint[], $13::bigint[], $14::text[], $15::int[], $16::text[])`,
      [
        column(rows, 'id'),
        column(rows, 'message_id'),
        column(rows, 'channel'),
        column(rows, 'seq'),
        column(rows, 'sender'),
        column(rows, 'idempotency_key'),
        column(rows, 'fingerprint'),
        column(rows, 'kind'),
        column(rows, 'priority'),
        column(rows, 'received_at'),
        column(rows, 'body'),
        column(rows, 'checksum'),
        column(rows, 'size'),
        column(rows, 'thread_id'),
        column(rows, 'hop'),
        column(rows, 'reply_to_id'),
      ],
    );
    n += rows.length;
  }
  return n;
}

interface DeliveryRow {
  id: number;
  message: number;
  recipient: string;
  channel: string;
  priority: number;
  state: number;
  attempt: number;
  available_at: number;
  lease_expires_at: number | null;
  expires_at: number | null;
}

async function copyDeliveries(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<DeliveryRow>(
    source,
    `SELECT id, message, recipient, channel, priority, state, attempt, available_at,
            lease_expires_at, expires_at
     FROM deliveries WHERE id > ? ORDER BY id LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO deliveries (id, message, recipient, channel, priority, state, attempt,
         available_at, lease_expires_at, expires_at)
       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::smallint[],
         $6::smallint[], $7::int[], $8::bigint[], $9::bigint[], $10::bigint[])`,
      [
        column(rows, 'id'),
        column(rows, 'message'),
        column(rows, 'recipient'),
        column(rows, 'channel'),
        column(rows, 'priority'),
        column(rows, 'state'),
        column(rows, 'attempt'),
        column(rows, 'available_at'),
        column(rows, 'lease_expires_at'),
        column(rows, 'expires_at'),
      ],
    );
    n += rows.length;
  }
  return n;
}

interface DeadLetterRow {
  id: number;
  delivery: number;
  message: number;
  recipient: string;
  reason: string;
  attempts: number;
  created_at: number;
  replay_delivery: number | null;
  note: string | null;
}

async function copyDeadLetters(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<DeadLetterRow>(
    source,
    `SELECT id, delivery, message, recipient, reason, attempts, created_at, replay_delivery, note
     FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO dead_letters (id, delivery, message, recipient, reason, attempts, created_at,
         replay_delivery, note)
       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[],
         $6::int[], $7::bigint[], $8::bigint[], $9::text[])`,
      [
        column(rows, 'id'),
        column(rows, 'delivery'),
        column(rows, 'message'),
        column(rows, 'recipient'),
        column(rows, 'reason'),
        column(rows, 'attempts'),
        column(rows, 'created_at'),
        column(rows, 'replay_delivery'),
        column(rows, 'note'),
      ],
    );
    n += rows.length;
  }
  return n;
}

/**
 * One row per agent the file knows: its last contact (SQLite's agents), and what the
 * PostgreSQL schema keeps per agent besides, counted from the rows copied: its open deliveries
 * (pending or leased) and the critical ones among them, and the stored bytes of the messages
 * it sent (the sizes its share is counted in; none sent: NULL).
 */
async function copyAgents(source: Database.Database, client: pg.Client): Promise<number> {
  const rows = source
    .prepare<
      [],
      {
        id: string;
        last_seen: number | null;
        depth: number;
        critical: number;
        stored_bytes: number | null;
      }
    >(`
      WITH ids AS (
        SELECT id FROM agents
        UNION SELECT recipient FROM deliveries WHERE state IN (0, 1)
        UNION SELECT sender FROM messages
      ), open AS (
        SELECT recipient, count(*) AS depth, sum(priority) AS critical
        FROM deliveries WHERE state IN (0, 1) GROUP BY recipient
      ), sent AS (
        SELECT sender, sum(size) AS bytes FROM messages GROUP BY sender
      )
      SELECT ids.id, a.last_seen, coalesce(o.depth, 0) AS depth,
             coalesce(o.critical, 0) AS critical, s.bytes AS stored_bytes
      FROM ids
      LEFT JOIN agents a ON a.id = ids.id
      LEFT JOIN open o ON o.recipient = ids.id
      LEFT JOIN sent s ON s.sender = ids.id
      ORDER BY ids.id`)
    .all();
  // rows an adapter made at start (nothing stored) take the file's counts; the later contact wins
  await client.query(
    `INSERT INTO agents (id, last_seen, depth, critical, stored_bytes)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $4::int[], $5::bigint[])
     ON CONFLICT (id) DO UPDATE SET last_seen = greatest(agents.last_seen, excluded.last_seen),
       depth = excluded.depth, critical = excluded.critical,
       stored_bytes = excluded.stored_bytes`,
    [
      column(rows, 'id'),
      column(rows, 'last_seen'),
      column(rows, 'depth'),
      column(rows, 'critical'),
      column(rows, 'stored_bytes'),
    ],
  );
  return rows.length;
}

async function copyThreads(source: Database.Database, client: pg.Client): Promise<number> {
  const rows = source
    .prepare<[], { thread_id: string; count: number; last_at: number }>(
      'SELECT thread_id, count, last_at FROM threads',
    )
    .all();
  await client.query(
    `INSERT INTO threads (thread_id, count, last_at)
     SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])
     ON CONFLICT (thread_id) DO UPDATE SET count = excluded.count, last_at = excluded.last_at`,
    [column(rows, 'thread_id'), column(rows, 'count'), column(rows, 'last_at')],
  );
  return rows.length;
}

async function copyAlertState(source: Database.Database, client: pg.Client): Promise<number> {
  const rows = source
    .prepare<[], AlertRow>(
      `SELECT recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender
       FROM alert_state`,
    )
    .all();
  await client.query(
    `INSERT INTO alert_state (recipient, reason, kind, last_sent_at, count, message_ids,
       attempts, sender)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::int[],
       $6::text[], $7::int[], $8::text[])
     ON CONFLICT (recipient, reason) DO UPDATE SET kind = excluded.kind,
       last_sent_at = excluded.last_sent_at, count = excluded.count,
       message_ids = excluded.message_ids, attempts = excluded.attempts, sender = excluded.sender`,
    [
      column(rows, 'recipient'),
      column(rows, 'reason'),
      column(rows, 'kind'),
      column(rows, 'last_sent_at'),
      column(rows, 'count'),
      column(rows, 'message_ids'),
      column(rows, 'attempts'),
      column(rows, 'sender'),
    ],
  );
  return rows.length;
}

interface EventRow {
  id: number;
  message: number;
  delivery: number;
  recipient: string;
  at: number;
  event: string;
  attempt: number;
  detail: string | null;
}

async function copyEvents(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<EventRow>(
    source,
    `SELECT id, message, delivery, recipient, at, event, attempt, detail
     FROM delivery_events WHERE id > ? ORDER BY id LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO delivery_events (id, message, delivery, recipient, at, event, attempt, detail)
       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[],
         $6::text[], $7::int[], $8::text[])`,
      [
        column(rows, 'id'),
        column(rows, 'message'),
        column(rows, 'delivery'),
        column(rows, 'recipient'),
        column(rows, 'at'),
        column(rows, 'event'),
        column(rows, 'attempt'),
        column(rows, 'detail'),
      ],
    );
    n += rows.length;
  }
  return n;
}

async function copyPolls(source: Database.Database, client: pg.Client): Promise<number> {
  const rows = source
    .prepare<[], { agent: string; last_poll: number }>('SELECT agent, last_poll FROM agent_polls')
    .all();
  // an agent that polled an adapter already started on the database: the later poll wins
  await client.query(
    `INSERT INTO agent_polls (agent, last_poll) SELECT * FROM unnest($1::text[], $2::bigint[])
     ON CONFLICT (agent) DO UPDATE SET last_poll = greatest(agent_polls.last_poll,
       excluded.last_poll)`,
    [column(rows, 'agent'), column(rows, 'last_poll')],
  );
  return rows.length;
}

/**
 * The operators' rows (docs/design/operators.md): each pause and resume, with each agent's last
 * one, when a pause, in its agents row (where PostgreSQL's leases read it); the redrives with
 * their cursors; the audit log, hashes and all.
 */
async function copyOperators(
  source: Database.Database,
  client: pg.Client,
): Promise<{ pauses: number; redrives: number; audit: number }> {
  const pauses = source
    .prepare<[], { id: number; agent: string; at: number; event: string; by: string }>(
      'SELECT id, agent, at, event, by FROM agent_pauses ORDER BY id',
    )
    .all();
  await client.query(
    `INSERT INTO agent_pauses (id, agent, at, event, by)
     SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[])`,
    [
      column(pauses, 'id'),
      column(pauses, 'agent'),
      column(pauses, 'at'),
      column(pauses, 'event'),
      column(pauses, 'by'),
    ],
  );
  const last = new Map(pauses.map((p) => [p.agent, p]));
  const paused = [...last.values()].filter((p) => p.event === 'paused');
  await client.query(
    `INSERT INTO agents (id, paused_at, paused_by)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
     ON CONFLICT (id) DO UPDATE SET paused_at = excluded.paused_at, paused_by = excluded.paused_by`,
    [column(paused, 'agent'), column(paused, 'at'), column(paused, 'by')],
  );
  const redrives = source.prepare<[], Record<string, unknown>>('SELECT * FROM redrives').all();
  const redriveColumns = [
    ['id', 'text'],
    ['created_at', 'bigint'],
    ['by', 'text'],
    ['selection', 'text'],
    ['max_dead', 'bigint'],
    ['rate', 'int'],
    ['total', 'int'],
    ['done', 'int'],
    ['skipped', 'int'],
    ['state', 'text'],
    ['cursor_message', 'bigint'],
    ['cursor_dead', 'bigint'],
  ] as const;
  await client.query(
    `INSERT INTO redrives (${redriveColumns.map(([c]) => c).join(', ')})
     SELECT * FROM unnest(${redriveColumns.map(([, t], i) => `$${i + 1}::${t}[]`).join(', ')})`,
    redriveColumns.map(([c]) => redrives.map((r) => r[c])),
  );
  let audit = 0;
  for (const rows of batches<{ id: number } & Record<string, unknown>>(
    source,
    `SELECT seq AS id, at, actor, action, target, detail, prev_hash, hash
     FROM audit_log WHERE seq > ? ORDER BY seq LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO audit_log (seq, at, actor, action, target, detail, prev_hash, hash)
       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
         $6::text[], $7::text[], $8::text[])`,
      ['id', 'at', 'actor', 'action', 'target', 'detail', 'prev_hash', 'hash'].map((k) =>
        rows.map((r) => r[k]),
      ),
    );
    audit += rows.length;
  }
  await copyAuditAnchor(source, client);
  return { pauses: pauses.length, redrives: redrives.length, audit };
}

/**
 * The audit log's anchor as the file keeps it (rules/audit-chain.ts), so the copied log
 * verifies as it did, breaks included: a row (or table) gone from the file is gone here too.
 */
async function copyAuditAnchor(source: Database.Database, client: pg.Client): Promise<void> {
  const table = source
    .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_anchor'")
    .get();
  const row =
    table === undefined
      ? undefined
      : source
          .prepare<[], { seq: number; hash: string; pruned_seq: number; pruned_hash: string }>(
            'SELECT seq, hash, pruned_seq, pruned_hash FROM audit_anchor WHERE id = 1',
          )
          .get();
  if (row === undefined) {
    await client.query('DELETE FROM audit_anchor');
    return;
  }
  await client.query(
    `INSERT INTO audit_anchor (id, seq, hash, pruned_seq, pruned_hash) VALUES (1, $1, $2, $3, $4)
     ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash,
       pruned_seq = excluded.pruned_seq, pruned_hash = excluded.pruned_hash`,
    [row.seq, row.hash, row.pruned_seq, row.pruned_hash],
  );
}

/** Scheduled messages as they are: still to fire, or cancelled (their keys stay taken). */
async function copyScheduled(source: Database.Database, client: pg.Client): Promise<number> {
  const cols = [
    ['id', 'bigint'],
    ['message_id', 'text'],
    ['sender', 'text'],
    ['idempotency_key', 'text'],
    ['fingerprint', 'bytea'],
    ['channel', 'text'],
    ['received_at', 'bigint'],
    ['deliver_at', 'bigint'],
    ['cancelled_at', 'bigint'],
    ['draft', 'text'],
  ] as const;
  let n = 0;
  for (const rows of batches<{ id: number } & Record<string, unknown>>(
    source,
    `SELECT ${cols.map(([c]) => c).join(', ')} FROM scheduled WHERE id > ? ORDER BY id LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO scheduled (${cols.map(([c]) => c).join(', ')})
       SELECT * FROM unnest(${cols.map(([, t], i) => `$${i + 1}::${t}[]`).join(', ')})`,
      cols.map(([c]) => rows.map((r) => r[c])),
    );
    n += rows.length;
  }
  return n;
}
