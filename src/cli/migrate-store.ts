/**
 * `agent-gateway migrate-store --from <sqlite file> --to <postgres url>`: copies a stopped
 * SQLite adapter's store into an empty PostgreSQL database (docs/deploy.md, "Moving a SQLite
 * adapter's data to PostgreSQL"). The file is opened read-only, in one read transaction; the
 * database gets its schema from the PostgreSQL store's own migrations, and everything is copied
 * in one transaction: channels with their counters, messages with every column and their ids,
 * deliveries in their states, dead letters, agents (last contact, and the queue depths and
 * stored bytes the PostgreSQL schema keeps per agent, counted from the copied rows), threads and
 * the alert aggregation. Then the id sequences are moved past the copied ids. One line of
 * counts on stdout. Exit 0: copied; 2: a bad argument or a refusal (the file is held by another
 * process, is not an adapter's store of this version, or the database already holds messages);
 * 1: a failure (nothing of the copy is left behind: the transaction rolled back).
 */
import { readFileSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import { isPostgresUrl, shownDb } from '../store/open.js';
import { PG_MIGRATIONS } from '../store/postgres/pg-sql.js';
import type { AlertRow } from '../store/rules/alert-rows.js';
import { MIGRATIONS } from '../store/sqlite/sql.js';

const USAGE = 'usage: agent-gateway migrate-store --from <sqlite file> --to <postgres url>';

/** Rows per INSERT, and the body bytes after which a batch goes out sooner. */
const BATCH_ROWS = 1000;
const BATCH_BYTES = 16 * 1024 * 1024;

/** A refusal or a bad argument: one line, exit 2. */
class Refusal extends Error {}

export async function runMigrateStore(argv: readonly string[]): Promise<number> {
  const say = (line: string) => process.stderr.write(`agent-gateway migrate-store: ${line}\n`);
  let from: string;
  let to: string;
  try {
    ({ from, to } = readArgs(argv));
  } catch (err) {
    // node's parseArgs explains at length how to pass a positional: its first sentence will do
    say(`${(err as Error).message.split('. ')[0]} (${USAGE})`);
    return 2;
  }
  let source: Database.Database | undefined;
  try {
    refuseIfHeld(from);
    source = openSource(from);
    const counts = await copy(source, to);
    process.stdout.write(
      `migrate-store: copied ${counts.channels} channels, ${counts.messages} messages, ` +
        `${counts.deliveries} deliveries, ${counts.deadLetters} dead letters, ` +
        `${counts.agents} agents, ${counts.threads} threads, ${counts.alerts} alert states ` +
        `from ${from} into ${shownDb(to)}\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof Refusal) {
      say(err.message);
      return 2;
    }
    say(`failed, nothing was copied: ${messageOf(err)}`);
    return 1;
  } finally {
    source?.close();
  }
}

/** One line about an error (a connection's AggregateError has no message of its own). */
function messageOf(err: unknown): string {
  const e = err as { message?: string; code?: string; errors?: unknown[] };
  const text = e.message || e.code || (e.errors?.[0] !== undefined ? messageOf(e.errors[0]) : '');
  return (text || String(err)).replace(/\s+/g, ' ');
}

function readArgs(argv: readonly string[]): { from: string; to: string } {
  const { values } = parseArgs({
    args: [...argv],
    options: { from: { type: 'string' }, to: { type: 'string' } },
    strict: true,
    allowPositionals: false,
  });
  if (values.from === undefined || values.from === '') throw new Error('--from is required');
  if (values.to === undefined || values.to === '') throw new Error('--to is required');
  if (!isPostgresUrl(values.to)) throw new Error('--to must be a postgres:// or postgresql:// URL');
  return { from: values.from, to: values.to };
}

/**
 * Refuses a file another process has open (an adapter still running on it, or any other
 * SQLite connection: in WAL mode each holds a read lock on the file for as long as it is open),
 * from /proc/locks. Where there is no /proc/locks (not Linux) nothing is checked: stopping the
 * adapter first is the documented step either way.
 */
function refuseIfHeld(file: string): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(file);
  } catch {
    throw new Refusal(`no such file: ${file}`);
  }
  if (!st.isFile()) throw new Refusal(`not a file: ${file}`);
  let locks: string;
  try {
    locks = readFileSync('/proc/locks', 'utf8');
  } catch {
    return;
  }
  // /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex
  const dev = Number(st.dev);
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  const where = `${hex2(major)}:${hex2(minor)}:${st.ino}`;
  for (const line of locks.split('\n')) {
    const f = line.trim().split(/\s+/);
    // "1: POSIX  ADVISORY  READ 13034 fe:00:2147468 1073741826 1073742335" (a blocked waiter's
    // line starts with "->" and shifts by one field)
    const at = f.indexOf(where);
    if (at < 1) continue;
    const pid = Number(f[at - 1]);
    if (pid === process.pid) continue;
    throw new Refusal(
      `${file} is open in process ${pid} (an adapter still running on it?): stop it first`,
    );
  }
}

const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/** The SQLite store, read-only, at this program's schema version. */
function openSource(file: string): Database.Database {
  let db: Database.Database;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new Refusal(`cannot open ${file} as SQLite: ${(err as Error).message}`);
  }
  try {
    const version = db.pragma('user_version', { simple: true }) as number;
    const hasMessages = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'")
      .get();
    if (version === 0 || hasMessages === undefined)
      throw new Refusal(`${file} is not an adapter's store`);
    if (version < MIGRATIONS.length)
      throw new Refusal(
        `${file} is at schema version ${version}, older than this program's ` +
          `${MIGRATIONS.length}: start this version's adapter on it once (it migrates at ` +
          'start), stop it, and run this again',
      );
    if (version > MIGRATIONS.length)
      throw new Refusal(
        `${file} is at schema version ${version}, newer than this program's ` +
          `${MIGRATIONS.length}: use the agent-gateway that wrote it`,
      );
    return db;
  } catch (err) {
    db.close();
    if (err instanceof Refusal) throw err;
    throw new Refusal(`cannot read ${file} as an adapter's store: ${(err as Error).message}`);
  }
}

interface Counts {
  channels: number;
  messages: number;
  deliveries: number;
  deadLetters: number;
  agents: number;
  threads: number;
  alerts: number;
}

/** The tables the copy writes, locked against every writer (other adapters) until COMMIT. */
const TABLES = 'channels, agents, messages, deliveries, dead_letters, threads, alert_state';

async function copy(source: Database.Database, url: string): Promise<Counts> {
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
    const counts: Counts = {
      channels: await copyChannels(source, client),
      messages: await copyMessages(source, client),
      deliveries: await copyDeliveries(source, client),
      deadLetters: await copyDeadLetters(source, client),
      agents: await copyAgents(source, client),
      threads: await copyThreads(source, client),
      alerts: await copyAlertState(source, client),
    };
    for (const table of ['messages', 'deliveries', 'dead_letters'])
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
  const { openPgStore } = await import('../store/postgres/pg-store.js');
  const store = await openPgStore(url, {});
  await store.close();
}

async function refuseIfNotEmpty(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ version: number | null; used: boolean }>(`
    SELECT (SELECT max(version) FROM agw_schema) AS version,
           EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM deliveries)
             OR EXISTS (SELECT 1 FROM dead_letters)
             OR EXISTS (SELECT 1 FROM channels WHERE last_seq > 0) AS used`);
  const [{ version, used }] = rows as [{ version: number | null; used: boolean }];
  if (version !== PG_MIGRATIONS.length)
    throw new Refusal(
      `the database is at schema version ${version}, not this program's ${PG_MIGRATIONS.length}`,
    );
  if (used)
    throw new Refusal(
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
}

async function copyMessages(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<MessageRow>(
    source,
    `SELECT id, message_id, channel, seq, sender, idempotency_key, fingerprint, kind, priority,
            received_at, body, checksum, size, thread_id, hop
     FROM messages WHERE id > ? ORDER BY id LIMIT ?`,
    (r) => r.body.length,
  )) {
    await client.query(
      `INSERT INTO messages (id, message_id, channel, seq, sender, idempotency_key, fingerprint,
         kind, priority, received_at, body, checksum, size, thread_id, hop)
       SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[],
         $6::text[], $7::bytea[], $8::text[], $9::smallint[], $10::bigint[], $11::text[],
         $12::bigint[], $13::bigint[], $14::text[], $15::int[])`,
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
}

async function copyDeliveries(source: Database.Database, client: pg.Client): Promise<number> {
  let n = 0;
  for (const rows of batches<DeliveryRow>(
    source,
    `SELECT id, message, recipient, channel, priority, state, attempt, available_at,
            lease_expires_at
     FROM deliveries WHERE id > ? ORDER BY id LIMIT ?`,
  )) {
    await client.query(
      `INSERT INTO deliveries (id, message, recipient, channel, priority, state, attempt,
         available_at, lease_expires_at)
       SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::smallint[],
         $6::smallint[], $7::int[], $8::bigint[], $9::bigint[])`,
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
