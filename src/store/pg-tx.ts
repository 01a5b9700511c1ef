/**
 * One transaction of the PostgreSQL store, as the parts of a commit see it: its connection, the
 * agents rows it locked (depths, stored bytes and last_seen, changed in memory under those locks
 * and written back by one statement at its end), the alert events it raised, and the effects it
 * had. A transaction that is retried starts again with a fresh Tx.
 */
import type pg from 'pg';
import { PG_SQL, type PgStatement } from './pg-sql.js';
import { CommitEffectsLog } from './sqlite-effects.js';
import type { AlertReason } from './store.js';

/** An alert counted by a transaction: a row of alert_events once it commits. */
export interface AlertEvent {
  readonly recipient: string;
  readonly reason: AlertReason;
  readonly messageId: string | null;
  readonly attempts: number;
  readonly at: number;
  readonly count: number;
  readonly sender: string | null;
}

/** A stored message as its idempotency key finds it. */
export interface KeyRow {
  message_id: string;
  channel: string;
  seq: number;
  received_at: number;
  fingerprint: Buffer;
  thread_id: string;
  hop: number;
}

export const keyOf = (sender: string, key: string) => `${sender}\u0000${key}`;

/** An agents row, locked by this transaction. */
export interface AgentRow {
  depth: number;
  critical: number;
  /** Stored bytes of its messages as a sender; null: it never sent one. */
  bytes: number | null;
  /** A heartbeat in this transaction. */
  seen: number | null;
  dirty: boolean;
}

export class Tx {
  readonly fx = new CommitEffectsLog();
  readonly agents = new Map<string, AgentRow>();
  /** Agents rows this transaction inserted (known to exist once it commits). */
  readonly created: string[] = [];
  readonly events: AlertEvent[] = [];
  /** The counters of the channels locked: the last number given, and whether it moved. */
  readonly seqs = new Map<string, { last: number; moved: boolean }>();
  /** Stored messages by sender and key, as read under the senders' locks (keyOf). */
  readonly keys = new Map<string, KeyRow>();
  /** Thread locks held (pg_advisory_xact_lock): thread ids. */
  readonly threads = new Set<string>();
  /** A message was written (its commit is then synchronous at AGW_SYNC=full). */
  wroteMessage = false;
  /** Bytes of messages this transaction stored, less what it pruned (the size bound). */
  addedBytes = 0;
  /** Where raised alerts go; the alerts transaction folds them at once instead. */
  onRaise: ((e: AlertEvent) => void) | undefined;

  constructor(readonly client: pg.ClientBase) {}

  async q<R>(name: PgStatement, values: readonly unknown[] = []): Promise<R[]> {
    const r = await this.client.query({ name, text: PG_SQL[name], values: values as unknown[] });
    return r.rows as R[];
  }

  async one<R>(name: PgStatement, values: readonly unknown[] = []): Promise<R | undefined> {
    return (await this.q<R>(name, values))[0];
  }

  /** Counts an event towards its (recipient, reason) alert (sqlite-alerts.ts, raise). */
  raise(
    recipient: string,
    reason: AlertReason,
    messageId: string | undefined,
    attempts: number,
    at: number,
    count = 1,
    sender: string | null = null,
  ): void {
    const e: AlertEvent = {
      recipient,
      reason,
      messageId: messageId === undefined || messageId === '' ? null : messageId,
      attempts,
      at,
      count,
      sender,
    };
    if (this.onRaise !== undefined) this.onRaise(e);
    else this.events.push(e);
  }

  /** Locks these channels' counters (sorted; the ones already held are skipped). */
  async lockChannels(names: Iterable<string>): Promise<void> {
    const want = [...new Set(names)].filter((n) => !this.seqs.has(n)).sort();
    if (want.length === 0) return;
    const rows = await this.q<{ name: string; last_seq: number }>('lockChannels', [want]);
    for (const r of rows) this.seqs.set(r.name, { last: r.last_seq, moved: false });
  }

  /** Reads the stored messages of these keys (their senders locked), one statement. */
  async loadKeys(pairs: readonly (readonly [string, string])[]): Promise<void> {
    const want = pairs.filter(([s, k]) => !this.keys.has(keyOf(s, k)));
    if (want.length === 0) return;
    const rows = await this.q<KeyRow & { sender: string; idempotency_key: string }>('findKeys', [
      want.map((p) => p[0]),
      want.map((p) => p[1]),
    ]);
    for (const r of rows) this.keys.set(keyOf(r.sender, r.idempotency_key), r);
    this.loadedKeys += want.length;
    for (const [s, k] of want) this.#looked.add(keyOf(s, k));
  }

  /** Whether a key was looked up (or stored) in this transaction. */
  looked(sender: string, key: string): boolean {
    return this.#looked.has(keyOf(sender, key));
  }

  readonly #looked = new Set<string>();
  loadedKeys = 0;

  /**
   * Locks these agents rows, sorted, creating the missing ones (`known`: ids known to exist).
   * With `skip`, rows another transaction holds are skipped: the ids locked are returned.
   */
  async lockAgents(ids: Iterable<string>, known: ReadonlySet<string>, skip = false) {
    const want = [...new Set(ids)].filter((id) => !this.agents.has(id)).sort();
    if (want.length === 0) return [];
    const missing = want.filter((id) => !known.has(id));
    if (missing.length > 0) {
      await this.q('ensureAgents', [missing]);
      this.created.push(...missing);
    }
    const rows = await this.q<{
      id: string;
      depth: number;
      critical: number;
      stored_bytes: number | null;
    }>(skip ? 'lockAgentsSkip' : 'lockAgents', [want]);
    for (const r of rows) {
      this.agents.set(r.id, {
        depth: r.depth,
        critical: r.critical,
        bytes: r.stored_bytes,
        seen: null,
        dirty: false,
      });
    }
    return rows.map((r) => r.id);
  }

  /** The locked row of an agent; a bug if it was not locked. */
  agent(id: string): AgentRow {
    const a = this.agents.get(id);
    if (a === undefined) throw new Error(`agent ${id} was not locked by this transaction`);
    return a;
  }

  bump(id: string, all: number, critical: number): void {
    const a = this.agent(id);
    a.depth += all;
    a.critical += critical;
    a.dirty = true;
  }

  /** Locks the budget of these threads (sorted; the ones already held are skipped). */
  async lockThreads(ids: Iterable<string>): Promise<void> {
    const want = [...new Set(ids)].filter((t) => !this.threads.has(t));
    if (want.length === 0) return;
    await this.q('lockThreads', [want]);
    for (const t of want) this.threads.add(t);
  }

  /**
   * The end of the transaction, before COMMIT: the changed agents rows, the events, and the
   * announcement `notify` (null: none), in one statement.
   */
  async finish(notify: string | null): Promise<void> {
    const dirty = [...this.agents].filter(([, a]) => a.dirty);
    const moved = [...this.seqs].filter(([, c]) => c.moved);
    if (dirty.length === 0 && moved.length === 0 && this.events.length === 0 && notify === null)
      return;
    const ev = this.events;
    await this.q('finish', [
      dirty.map(([id]) => id),
      dirty.map(([, a]) => a.depth),
      dirty.map(([, a]) => a.critical),
      dirty.map(([, a]) => a.bytes),
      dirty.map(([, a]) => a.seen),
      ev.map((e) => e.recipient),
      ev.map((e) => e.reason),
      ev.map((e) => e.messageId),
      ev.map((e) => e.attempts),
      ev.map((e) => e.at),
      ev.map((e) => e.count),
      ev.map((e) => e.sender),
      notify,
      moved.map(([n]) => n),
      moved.map(([, c]) => c.last),
    ]);
  }
}
