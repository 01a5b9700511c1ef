/**
 * The SQLite store: WAL, statements prepared once, numbered migrations, one transaction per
 * group of appends.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { Assignment } from '../protocol/envelope.js';
import { GatewayError } from '../protocol/errors.js';
import { uuidv7 } from '../protocol/ids.js';
import { MIGRATIONS, SQL } from './sql.js';
import type { AppendOutcome, MessageDraft, Store } from './store.js';

/**
 * - `full` (default): the WAL is fsynced at every commit, so an acknowledged message survives
 *   power loss. With group commit that is one fsync per batch, not per message.
 * - `normal`: the WAL is fsynced only at checkpoints. A process crash (SIGKILL, OOM) still loses
 *   nothing, since committed pages are in the OS page cache; a power loss or kernel crash can
 *   lose the transactions committed since the last checkpoint (up to ~1000 pages of WAL by
 *   default), i.e. messages that were already acknowledged.
 */
export type SyncMode = 'full' | 'normal';

const SYNC_LEVEL: Record<SyncMode, number> = { normal: 1, full: 2 };

interface KeyRow {
  message_id: string;
  channel: string;
  seq: number;
  received_at: number;
  fingerprint: Buffer;
}

export class SqliteStore implements Store {
  readonly #db: Database.Database;
  readonly #file: string;
  readonly #lastSeq: Database.Statement<[string], number>;
  readonly #nextSeq: Database.Statement<[string], number>;
  readonly #findByKey: Database.Statement<[string, string], KeyRow>;
  readonly #insertMessage: Database.Statement;
  readonly #insertDelivery: Database.Statement;
  readonly #channelMessages: Database.Statement<[string, number, number], string>;
  readonly #ensureChannel: Database.Statement<[string]>;
  readonly #appendTx: (drafts: readonly MessageDraft[]) => AppendOutcome[];

  constructor(file: string, opts: { sync?: SyncMode } = {}) {
    const sync = opts.sync ?? 'full';
    this.#file = file;
    this.#db = new Database(file);
    try {
      this.#db.pragma('journal_mode = WAL');
      // Set on every open and read back: better-sqlite3 connections start at the compiled-in
      // default, so a mode set once on another connection does not carry over.
      this.#db.pragma(`synchronous = ${sync.toUpperCase()}`);
      const level = this.#db.pragma('synchronous', { simple: true });
      if (level !== SYNC_LEVEL[sync])
        throw new Error(`synchronous=${sync} did not take (got ${level})`);
      // Another connection (the quick_check worker, an operator's sqlite3) may hold a lock for a
      // moment; wait for it rather than fail a commit.
      this.#db.pragma('busy_timeout = 5000');
      migrate(this.#db);
    } catch (err) {
      this.#db.close();
      throw err;
    }
    const db = this.#db;
    this.#lastSeq = db.prepare<[string], number>(SQL.lastSeq).pluck();
    this.#nextSeq = db.prepare<[string], number>(SQL.nextSeq).pluck();
    this.#findByKey = db.prepare<[string, string], KeyRow>(SQL.findByKey);
    this.#insertMessage = db.prepare(SQL.insertMessage);
    this.#insertDelivery = db.prepare(SQL.insertDelivery);
    this.#channelMessages = db
      .prepare<[string, number, number], string>(SQL.channelMessages)
      .pluck();
    this.#ensureChannel = db.prepare<[string]>(SQL.ensureChannel);
    this.#appendTx = db.transaction((drafts: readonly MessageDraft[]) =>
      drafts.map((d) => this.#appendOne(d)),
    );
  }

  append(drafts: readonly MessageDraft[]): AppendOutcome[] {
    // better-sqlite3 runs BEGIN ... COMMIT synchronously: when this returns, the commit (and
    // with synchronous=FULL its fsync) is done, so callers may acknowledge.
    return this.#appendTx(drafts);
  }

  #appendOne(d: MessageDraft): AppendOutcome {
    const prior = this.#findByKey.get(d.sender, d.idempotencyKey);
    if (prior !== undefined) {
      if (!prior.fingerprint.equals(d.fingerprint)) {
        return rejected(
          new GatewayError(
            'idempotency_conflict',
            `idempotency_key ${d.idempotencyKey} was already used for a different message (${prior.message_id})`,
            { field: 'idempotency_key' },
          ),
        );
      }
      return {
        status: 200,
        assignment: assignment(
          prior.message_id,
          prior.channel,
          prior.seq,
          prior.received_at,
          d.idempotencyKey,
        ),
      };
    }
    if (d.replyTo !== null) {
      const last = this.#lastSeq.get(d.channel) ?? 0;
      if (d.replyTo > last) {
        return rejected(
          new GatewayError(
            'reply_to_not_found',
            `reply_to_sequence_id ${d.replyTo} names no message of ${d.channel} (its last is ${last})`,
            { field: 'reply_to_sequence_id' },
          ),
        );
      }
    }
    const seq = this.#nextSeq.get(d.channel);
    if (seq === undefined) throw new Error(`channel ${d.channel} has no sequence counter`);
    const a = assignment(uuidv7(d.receivedAt), d.channel, seq, d.receivedAt, d.idempotencyKey);
    const body = messageJson(a, d);
    const { lastInsertRowid } = this.#insertMessage.run(
      a.message_id,
      d.channel,
      seq,
      d.sender,
      d.idempotencyKey,
      d.fingerprint,
      d.kind,
      d.priority === 'critical' ? 1 : 0,
      d.receivedAt,
      body,
    );
    const priority = d.priority === 'critical' ? 1 : 0;
    for (const r of d.recipients)
      this.#insertDelivery.run(lastInsertRowid, r, priority, d.receivedAt);
    return { status: 201, assignment: a };
  }

  channelMessages(channel: string, afterSeq: number, limit: number): string[] {
    return this.#channelMessages.all(channel, afterSeq, limit);
  }

  ensureChannels(names: Iterable<string>): void {
    this.#db.transaction(() => {
      for (const n of names) this.#ensureChannel.run(n);
    })();
  }

  /** The synchronous mode the connection really has, read back from SQLite. */
  get synchronous(): SyncMode | number {
    const level = this.#db.pragma('synchronous', { simple: true }) as number;
    return level === 2 ? 'full' : level === 1 ? 'normal' : level;
  }

  quickCheck(): Promise<string[]> {
    return runQuickCheck(this.#file);
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }
}

function rejected(error: GatewayError): AppendOutcome {
  return { status: 'rejected', error };
}

function assignment(id: string, channel: string, seq: number, at: number, key: string): Assignment {
  return {
    message_id: id,
    channel,
    channel_sequence_id: seq,
    timestamp_iso8601: new Date(at).toISOString(),
    idempotency_key: key,
  };
}

/** The stored message: the assigned fields, the envelope, and the payload bytes as sent. */
function messageJson(a: Assignment, d: MessageDraft): string {
  const head = JSON.stringify({
    message_id: a.message_id,
    channel: a.channel,
    channel_sequence_id: a.channel_sequence_id,
    sender: d.sender,
    timestamp_iso8601: a.timestamp_iso8601,
    idempotency_key: d.idempotencyKey,
    to: d.channel,
    kind: d.kind,
    priority: d.priority,
    ...(d.replyTo === null ? {} : { reply_to_sequence_id: d.replyTo }),
  });
  return `${head.slice(0, -1)},"payload":${d.payloadJson}}`;
}

function migrate(db: Database.Database): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(
      `database schema version ${current} is newer than this adapter knows (${MIGRATIONS.length}); use a newer adapter`,
    );
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}

// PRAGMA quick_check reads every page: seconds on a large file. It runs on its own read-only
// connection in a worker thread so /healthz keeps answering meanwhile. The worker is plain
// JavaScript evaluated from a string so it runs the same from src/ (tests) and dist/.
const QUICK_CHECK_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
let db;
try {
  db = new Database(workerData.file, { readonly: true, fileMustExist: true });
  parentPort.postMessage({ rows: db.pragma('quick_check', { simple: false }).map((r) => r.quick_check) });
} catch (err) {
  parentPort.postMessage({ rows: ['cannot run quick_check: ' + err.message] });
} finally {
  if (db) db.close();
}`;

function runQuickCheck(file: string): Promise<string[]> {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  return new Promise((resolve, reject) => {
    const worker = new Worker(QUICK_CHECK_WORKER, { eval: true, workerData: { file, module } });
    worker.once('message', (m: { rows: string[] }) => resolve(m.rows.filter((r) => r !== 'ok')));
    worker.once('error', reject);
  });
}
