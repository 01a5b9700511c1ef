/**
 * The SQLite store: WAL, statements prepared once, numbered migrations. Its write methods run
 * inside transaction(), which the group commit opens once per group; the delivery half lives
 * in sqlite-deliveries.ts.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { crc32 } from 'node:zlib';
import Database from 'better-sqlite3';
import { ADAPTER_SENDER, type Assignment } from '../protocol/envelope.js';
import { GatewayError } from '../protocol/errors.js';
import { uuidv7 } from '../protocol/ids.js';
import { MIGRATIONS, SQL } from './sql.js';
import { Deliveries, type DeliveryConfig } from './sqlite-deliveries.js';
import type { AppendOutcome, MessageDraft } from './store.js';

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

export interface SqliteStoreOptions {
  /** full (default) or normal; see SyncMode. */
  readonly sync?: SyncMode;
  /** Bounds, leases, retries and the alert recipient; defaults fit tests of the write path. */
  readonly delivery?: Partial<DeliveryConfig>;
}

/** One ready-to-send JSON object per delivery, as the inbox answers it. */
export type DeliveryJson = string;

export class SqliteStore {
  readonly deliveries: Deliveries;
  readonly #db: Database.Database;
  readonly #file: string;
  readonly #s;
  readonly #tx: <T>(fn: () => T) => T;
  /** Set once a stored message failed its checksum: /health turns 503 and stays there. */
  corruption: string | undefined;

  constructor(file: string, opts: SqliteStoreOptions = {}) {
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
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      lastSeq: p<number>(SQL.lastSeq).pluck(),
      nextSeq: p<number>(SQL.nextSeq).pluck(),
      findByKey: p<KeyRow>(SQL.findByKey),
      insertMessage: p(SQL.insertMessage),
      channelMessages: p<BodyRow>(SQL.channelMessages),
      messageBody: p<BodyRow>(SQL.messageBody),
      ensureChannel: p(SQL.ensureChannel),
      touchAgent: p(SQL.touchAgent),
      agents: p<{ id: string; last_seen: number | null }>(SQL.agents),
      deadLetters: p<DeadRow>(SQL.deadLetters),
      deadLetter: p<DeadOne>(SQL.deadLetter),
      markReplayed: p(SQL.markReplayed),
      prunable: p<number>(SQL.prunable).pluck(),
      pruneDead: p(SQL.pruneDeadLetters),
      pruneDeliveries: p(SQL.pruneDeliveries),
      pruneMessage: p(SQL.pruneMessage),
    };
    const wrap = db.transaction((fn: () => unknown) => fn());
    this.#tx = <T>(fn: () => T) => wrap(fn) as T;
    const alertsTo = opts.delivery?.alertsTo ?? '';
    this.deliveries = new Deliveries(
      db,
      {
        capacity: 500,
        leaseMs: 30_000,
        maxRetries: 3,
        retryBaseMs: 1000,
        ...opts.delivery,
        alertsTo,
      },
      (kind, payload, now) => this.#appendAlert(alertsTo, kind, payload, now),
    );
  }

  /**
   * Runs fn in one transaction: when this returns, the commit (and with synchronous=FULL its
   * fsync) is done, so callers may answer. If fn throws, everything it wrote is rolled back.
   */
  transaction<T>(fn: () => T): T {
    try {
      return this.#tx(fn);
    } catch (err) {
      this.deliveries.reloadDepths();
      throw err;
    }
  }

  /** Appends drafts in order (inside transaction()): one outcome per draft. */
  append(drafts: readonly MessageDraft[]): AppendOutcome[] {
    return drafts.map((d) => this.#appendOne(d));
  }

  #appendOne(d: MessageDraft): AppendOutcome {
    const prior = this.#s.findByKey.get(d.sender, d.idempotencyKey);
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
      const last = this.#s.lastSeq.get(d.channel) ?? 0;
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
    const seq = this.#s.nextSeq.get(d.channel);
    if (seq === undefined) throw new Error(`channel ${d.channel} has no sequence counter`);
    const a = assignment(uuidv7(d.receivedAt), d.channel, seq, d.receivedAt, d.idempotencyKey);
    const body = messageJson(a, d);
    const priority = d.priority === 'critical' ? 1 : 0;
    const { lastInsertRowid } = this.#s.insertMessage.run(
      a.message_id,
      d.channel,
      seq,
      d.sender,
      d.idempotencyKey,
      d.fingerprint,
      d.kind,
      priority,
      d.receivedAt,
      body,
      crc32(body),
    );
    const row = Number(lastInsertRowid);
    const quiet = d.sender === ADAPTER_SENDER;
    for (const r of d.recipients) {
      this.deliveries.enqueue(row, a.message_id, r, priority, d.receivedAt, quiet);
    }
    return { status: 201, assignment: a };
  }

  /** The adapter's own message to @alertsTo, critical, in the caller's transaction. */
  #appendAlert(alertsTo: string, kind: string, payload: object, now: number): void {
    const payloadJson = JSON.stringify(payload);
    this.#appendOne({
      sender: ADAPTER_SENDER,
      idempotencyKey: uuidv7(now),
      fingerprint: Buffer.alloc(32),
      channel: `@${alertsTo}`,
      kind,
      priority: 'critical',
      replyTo: null,
      payloadJson,
      receivedAt: now,
      recipients: [alertsTo],
    });
  }

  /** Messages of a channel after afterSeq, in order, checksums verified. */
  channelMessages(channel: string, afterSeq: number, limit: number): string[] {
    return this.#s.channelMessages.all(channel, afterSeq, limit).map((r) => this.#verified(r));
  }

  /**
   * Hands out up to `max` of the agent's ready deliveries (inside transaction()). Every
   * message is checked before anything is leased, so a corrupt one fails the read whole.
   */
  lease(agent: string, max: number, now: number): DeliveryJson[] {
    const ready = this.deliveries.ready(agent, max, now);
    if (ready.length === 0) return [];
    const bodies = ready.map((r) => this.#verified(this.#s.messageBody.get(r.message)!));
    const attempts = this.deliveries.lease(
      ready.map((r) => r.id),
      now,
    );
    const expires = JSON.stringify(new Date(now + this.deliveries.leaseMs).toISOString());
    return ready.map(
      (r, i) =>
        `{"delivery_id":${r.id},"attempt":${attempts[i]},"lease_expires_at":${expires},"message":${bodies[i]}}`,
    );
  }

  /** Records a heartbeat; answers the agent's queue (pending = handed out or not, unacked). */
  heartbeat(agent: string, now: number): { pending: number; critical_pending: number } {
    this.#s.touchAgent.run(agent, now);
    const d = this.deliveries.depth(agent);
    return { pending: d.all, critical_pending: d.critical };
  }

  /** Every known agent's last heartbeat and queue depth. */
  agents(
    ids: Iterable<string>,
  ): { id: string; last_seen: string | null; queue_depth: number; critical_depth: number }[] {
    const seen = new Map(this.#s.agents.all().map((r) => [r.id, r.last_seen]));
    return [...ids].map((id) => {
      const d = this.deliveries.depth(id);
      const at = seen.get(id);
      return {
        id,
        last_seen: at === undefined || at === null ? null : new Date(at).toISOString(),
        queue_depth: d.all,
        critical_depth: d.critical,
      };
    });
  }

  /** Dead letters with id > after, oldest first, as JSON objects with their message. */
  deadLetters(after: number, limit: number): string[] {
    return this.#s.deadLetters
      .all(after, limit)
      .map(
        (r) =>
          `{"id":${r.id},"reason":${JSON.stringify(r.reason)},"attempts":${r.attempts},"recipient":${JSON.stringify(
            r.recipient,
          )},"dead_lettered_at":${JSON.stringify(new Date(r.created_at).toISOString())},"replay_delivery_id":${
            r.replay_delivery ?? 'null'
          },"message":${this.#verified({ id: r.message, body: r.body, checksum: r.checksum })}}`,
      );
  }

  /**
   * A fresh delivery for a dead letter (inside transaction()); a second replay of the same
   * dead letter returns the first one's delivery and makes nothing new.
   */
  replayDeadLetter(
    id: number,
    now: number,
  ): { delivery_id: number; replayed: boolean } | undefined {
    const dl = this.#s.deadLetter.get(id);
    if (dl === undefined) return undefined;
    if (dl.replay_delivery !== null) return { delivery_id: dl.replay_delivery, replayed: false };
    const delivery = this.deliveries.replay(
      dl.message,
      dl.message_id,
      dl.recipient,
      dl.priority,
      now,
    );
    this.#s.markReplayed.run(delivery, id);
    return { delivery_id: delivery, replayed: true };
  }

  /**
   * Prunes up to `limit` messages received before `before` (inside transaction()), with their
   * deliveries, dead letters and idempotency keys, except the kinds in `keep` and messages a
   * delivery still waits for. Returns how many went.
   */
  prune(before: number, keep: readonly string[], limit: number): number {
    const ids = this.#s.prunable.all(before, JSON.stringify(keep), limit);
    for (const id of ids) {
      this.#s.pruneDead.run(id);
      this.#s.pruneDeliveries.run(id);
      this.#s.pruneMessage.run(id);
    }
    return ids.length;
  }

  ensureChannels(names: Iterable<string>): void {
    this.transaction(() => {
      for (const n of names) this.#s.ensureChannel.run(n);
    });
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

  #verified(r: BodyRow): string {
    if (crc32(r.body) !== r.checksum) {
      this.corruption ??= `message row ${r.id} fails its checksum`;
      throw new GatewayError(
        'integrity_error',
        `stored message ${r.id} fails its checksum; it is not served (see the adapter's log)`,
      );
    }
    return r.body;
  }
}

interface BodyRow {
  id: number;
  body: string;
  checksum: number;
}

interface DeadRow {
  id: number;
  reason: string;
  attempts: number;
  recipient: string;
  created_at: number;
  replay_delivery: number | null;
  message: number;
  body: string;
  checksum: number;
}

interface DeadOne {
  id: number;
  message: number;
  recipient: string;
  replay_delivery: number | null;
  priority: number;
  message_id: string;
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
