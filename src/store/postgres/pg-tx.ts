/**
 * One transaction of the PostgreSQL store, as the parts of a commit see it: its connection, the
 * agents rows it locked (depths, stored bytes and last_seen, changed in memory under those locks
 * and written back by one statement at its end), the alert events it raised, and the effects it
 * had. A transaction that is retried starts again with a fresh Tx.
 */
import type { Writable } from 'node:stream';
import type pg from 'pg';
import { type AlertEvent, alertEvent } from '../rules/alert-rows.js';
import { CommitEffectsLog } from '../rules/commit-effects.js';
import type { DeliveryRow } from '../rules/deliveries.js';
import type { KeyRow, MessageRow } from '../rules/stored-message.js';
import type { TargetRow } from '../rules/thread-rows.js';
import type { DeliveryEvent } from '../store.js';
import { PG_SQL, type PgStatement } from './pg-sql.js';

/** A delivery that may be handed out now, with its message (readyLanes). */
export interface ReadyRow {
  id: number;
  message: number;
  attempt: number;
  body: string;
  checksum: number;
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
  /** Paused by an operator (its row's paused_at, paused_by): its leases hand out nothing. */
  paused: { since: number; by: string } | null;
}

/**
 * Every statement of a transaction is an index lookup, and its plan is made once per
 * connection (prepared), often while the tables are still small: without this the planner
 * would keep a sequential scan it chose then, over tables that grew since. And no JIT: a
 * sequential scan left (the size bound's sum over agents) costs 10^10 with the scans off, past
 * jit_above_cost, and the server then compiled storedBytes at every run, 300 ms of a 1 ms
 * statement (measured on PostgreSQL 15 with its LLVM JIT: every send near the bound took it).
 */
const BEGIN = 'BEGIN; SET LOCAL enable_seqscan = off; SET LOCAL jit = off';
/**
 * A group's statements also keep their generic plans (made once; each checked to be index
 * lookups on an empty schema, docs/design/postgres.md): PostgreSQL would otherwise plan a
 * statement again at every run whose arrays are shorter than its generic estimate (a group of
 * one), which costs more than running it.
 */
const BEGIN_GENERIC = `${BEGIN}; SET LOCAL plan_cache_mode = force_generic_plan`;

/** The statements that write the journey's events of their changes themselves (pg-sql.ts lease). */
const WRITES_EVENTS: ReadonlySet<string> = new Set<PgStatement>([
  'lease',
  'ackAll',
  'extendLeases',
]);

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
  /** Messages replies name, as found ('i' + message_id, or 's' + seq + ' ' + channel). */
  readonly targets = new Map<string, TargetRow>();
  /** The counts of threads held (null: no row), as read under their locks and then written. */
  readonly counts = new Map<string, number | null>();
  /**
   * Deliveries rows read under their agent's lock, kept as this transaction changes them (null:
   * no such delivery when read). Valid while `inserted` has not moved since the read.
   */
  readonly rows = new Map<number, DeliveryRow | null>();
  /**
   * How many deliveries to each recipient the group's appends have still to admit: how many
   * victims pg-deliveries.ts reads at once for the evictions they may need.
   */
  readonly toCome = new Map<string, number>();
  /** The ready deliveries of lease ops, read in the group's first round trip (pg-store.ts). */
  readonly lanes = new Map<object, ReadyRow[]>();
  /** The agents whose last poll this transaction writes, with its time (pg-store.ts #polled). */
  readonly polls = new Map<string, number>();
  /**
   * The journey's events of the changes made, in order (journeyEvent): message, delivery,
   * recipient, at, event, attempt, detail; sent by #insertEvents.
   */
  #journey: [number, number, string, number, DeliveryEvent, number, string | null][] = [];
  #rowsAt = 0;
  /** Delivery rows this transaction inserted (a cached "no such delivery" is then stale). */
  inserted = 0;
  /** A message was written (its commit is then synchronous at AGW_SYNC=full). */
  wroteMessage = false;
  /**
   * An ack or a final nack (dead letter) was applied: its commit is synchronous at
   * AGW_SYNC=full too, since a delivery acked with a 2xx must never be handed over again, also
   * after a crash of the database server (docs/reference/configuration.md, AGW_SYNC).
   */
  wroteAck = false;
  /**
   * An operator's act was written (a pause, a redrive or its step, an audit entry): answered
   * as done, so its commit is synchronous at AGW_SYNC=full too, as SQLite's is.
   */
  wroteOperatorAct = false;
  /** Bytes of messages this transaction stored, less what it pruned (the size bound). */
  addedBytes = 0;
  /** Where raised alerts go; the alerts transaction folds them at once instead. */
  onRaise: ((e: AlertEvent) => void) | undefined;

  /** BEGIN was sent (lazily, in front of the first statement). */
  #begun = false;
  /** Writes sent and not waited for. */
  #writes: Promise<void>[] = [];
  /** Statements sent, and the first that failed (the others then failed because it did). */
  #sent = 0;
  #first: { n: number; err: unknown } | undefined;

  /**
   * `client` must be in pipeline mode: every statement is sent at once, behind the ones before
   * it, and the server runs them in that order. Reads wait for their answer (one round trip
   * that carries every write sent before them); writes do not wait, and their errors come out
   * of the next read or of commit().
   */
  constructor(
    readonly client: pg.ClientBase,
    readonly generic = false,
  ) {}

  #send(
    name: PgStatement | 'BEGIN' | 'built',
    values: readonly unknown[],
    built?: { name: string; text: string },
  ): Promise<pg.QueryResult> {
    if (!this.#begun && name !== 'BEGIN') {
      this.#begun = true;
      this.write('BEGIN');
    }
    // the messages inserted so far go first: every statement after them sees them
    if (this.#messages.length > 0 && name !== 'insertMessages' && name !== 'BEGIN') {
      this.#insertMessages();
    }
    // and the events kept so far before a statement's own: the journey keeps the changes' order
    if (this.#journey.length > 0 && WRITES_EVENTS.has(name)) this.#insertEvents();
    this.#cork();
    const n = this.#sent++;
    const sent =
      name === 'BEGIN'
        ? this.client.query(this.generic ? BEGIN_GENERIC : BEGIN)
        : this.client.query({
            name: built?.name ?? name,
            text: built?.text ?? PG_SQL[name as PgStatement],
            values: values as unknown[],
          });
    return sent.catch((err: unknown) => {
      if (this.#first === undefined || n < this.#first.n) this.#first = { n, err };
      throw err;
    });
  }

  /**
   * The statements sent in one turn of the event loop leave in one write to the socket: the
   * stream is corked at the first and uncorked once the turn's synchronous work is done (an
   * answer cannot come before).
   */
  #cork(): void {
    if (this.#corked) return;
    const stream = (this.client as unknown as { connection?: { stream?: Writable } }).connection
      ?.stream;
    if (typeof stream?.cork !== 'function') return;
    this.#corked = true;
    stream.cork();
    process.nextTick(() => {
      this.#corked = false;
      stream.uncork();
    });
  }

  #corked = false;

  /** A read: sent behind every write before it, and waited for. */
  async q<R>(name: PgStatement, values: readonly unknown[] = []): Promise<R[]> {
    try {
      const r = await this.#send(name, values);
      return r.rows as R[];
    } catch (err) {
      // a statement before it failed first: that is the error (this one says "aborted")
      await this.#settle();
      throw this.#first?.err ?? err;
    }
  }

  /**
   * A read of a statement built at run time (from a filter: pg-operators.ts), prepared under
   * `name`, which names that text alone.
   */
  async qBuilt<R>(built: { name: string; text: string }, values: readonly unknown[]): Promise<R[]> {
    try {
      const r = await this.#send('built', values, built);
      return r.rows as R[];
    } catch (err) {
      await this.#settle();
      throw this.#first?.err ?? err;
    }
  }

  async one<R>(name: PgStatement, values: readonly unknown[] = []): Promise<R | undefined> {
    return (await this.q<R>(name, values))[0];
  }

  /**
   * A message and its deliveries (in recipient order; a queue_full copy dead at once, with
   * its dead letter), made at `at` with the deadline `expiresAt`: kept with the ones inserted
   * after it until the next statement, then sent with them as one (insertMessages).
   */
  insertMessage(
    m: MessageRow,
    recipients: readonly string[],
    states: readonly number[],
    at: number,
    expiresAt: number | null,
  ): void {
    this.#messages.push(m);
    for (const [i, r] of recipients.entries()) {
      this.#deliveries.push([m[0], r, states[i]!, at, expiresAt]);
    }
    this.inserted += recipients.length;
  }

  #messages: MessageRow[] = [];
  #deliveries: [string, string, number, number, number | null][] = [];

  #insertMessages(): void {
    const m = this.#messages;
    const d = this.#deliveries;
    this.#messages = [];
    this.#deliveries = [];
    const cols = Array.from({ length: 15 }, (_, i) => m.map((r) => r[i]));
    this.write('insertMessages', [
      ...cols,
      d.map((r) => r[0]),
      d.map((r) => r[1]),
      d.map((r) => r[2]),
      d.map((r) => r[3]),
      d.map((r) => r[4]),
    ]);
  }

  /** A write whose answer nobody needs: sent now, not waited for (BEGIN is one too). */
  write(name: PgStatement | 'BEGIN', values: readonly unknown[] = []): void {
    this.#writes.push(
      this.#send(name, values).then(
        () => undefined,
        () => undefined, // kept in #first
      ),
    );
  }

  async #settle(): Promise<void> {
    const writes = this.#writes;
    this.#writes = [];
    await Promise.all(writes);
  }

  /**
   * COMMIT (after `SET LOCAL synchronous_commit = off` unless `durable`), sent behind every
   * write; throws the first error of any statement, in which case nothing was committed.
   * Without a statement sent, there is nothing to commit and no round trip.
   */
  async commit(durable: boolean): Promise<void> {
    if (this.#messages.length > 0) this.#insertMessages();
    if (!this.#begun) return;
    this.#cork();
    const end = this.client
      .query(durable ? 'COMMIT' : 'SET LOCAL synchronous_commit = off; COMMIT')
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    await this.#settle();
    const err = await end;
    // a failed transaction's COMMIT answers ROLLBACK, without an error: the first error says
    if (this.#first !== undefined) throw this.#first.err;
    if (err !== undefined) throw err;
  }

  /** Whether a statement was sent (ROLLBACK is then needed after a failure). */
  get begun(): boolean {
    return this.#begun;
  }

  /** Deliveries rows by id (the caller holds their agent's lock), from the cache or read. */
  async deliveries(ids: readonly number[]): Promise<(DeliveryRow | undefined)[]> {
    const fresh = this.#rowsAt === this.inserted;
    const missing = [...new Set(ids)].filter((id) => {
      const r = this.rows.get(id);
      return r === undefined || (r === null && !fresh);
    });
    if (missing.length > 0) await this.readDeliveries(missing);
    return ids.map((id) => this.rows.get(id) ?? undefined);
  }

  /** Reads these deliveries rows into the cache (their agents locked). */
  async readDeliveries(ids: readonly number[]): Promise<void> {
    if (ids.length === 0) return;
    const at = this.inserted;
    const rows = await this.q<DeliveryRow>('deliveries', [ids]);
    if (this.#rowsAt !== at) {
      // rows cached before an insert: their "none" may be stale, their rows are not
      for (const [id, r] of this.rows) if (r === null) this.rows.delete(id);
      this.#rowsAt = at;
    }
    for (const id of ids) this.rows.set(id, null);
    for (const r of rows) this.rows.set(r.id, r);
  }

  /** A change this transaction wrote to a delivery, applied to its cached row. */
  changed(id: number, patch: Partial<DeliveryRow>): void {
    const r = this.rows.get(id);
    if (r) Object.assign(r, patch);
  }

  /**
   * One event of a delivery's journey (docs/design/journey.md), beside the change it records
   * (leases, acks and extensions write theirs in their own statements): kept, and written with
   * the others kept by one statement, before the next statement that writes events or at finish.
   */
  journeyEvent(
    r: { id: number; message: number; recipient: string; attempt: number },
    event: DeliveryEvent,
    at: number,
    detail?: object,
  ): void {
    const json = detail === undefined ? null : JSON.stringify(detail);
    this.#journey.push([r.message, r.id, r.recipient, at, event, r.attempt, json]);
  }

  #insertEvents(): void {
    const j = this.#journey;
    this.#journey = [];
    this.write(
      'insertEvents',
      Array.from({ length: 7 }, (_, i) => j.map((r) => r[i])),
    );
  }

  /** Counts an event towards its (recipient, reason) alert (folded by the alerts transaction). */
  raise(...event: Parameters<typeof alertEvent>): void {
    const e = alertEvent(...event);
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
      this.write('ensureAgents', [missing]); // in front of the lock, in the same round trip
      this.created.push(...missing);
    }
    const rows = await this.q<{
      id: string;
      depth: number;
      critical: number;
      stored_bytes: number | null;
      paused_at: number | null;
      paused_by: string | null;
    }>(skip ? 'lockAgentsSkip' : 'lockAgents', [want]);
    for (const r of rows) {
      this.agents.set(r.id, {
        depth: r.depth,
        critical: r.critical,
        bytes: r.stored_bytes,
        seen: null,
        dirty: false,
        paused: r.paused_at === null ? null : { since: r.paused_at, by: r.paused_by ?? '' },
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

  /**
   * Locks the budget of these threads (sorted; the ones already held are skipped); whether it
   * took a new one.
   */
  lockThreads(ids: Iterable<string>): boolean {
    const want = [...new Set(ids)].filter((t) => !this.threads.has(t));
    if (want.length === 0) return false;
    // sent, not waited for: every statement after it runs once it is held
    this.write('lockThreads', [want]);
    for (const t of want) this.threads.add(t);
    return true;
  }

  /**
   * The end of the transaction, before COMMIT: the journey's events still kept and the last
   * polls, each in one statement when there are any (a send has none); then the changed agents
   * rows, the counters, the alert events, and the announcement `notify` (null: none), in one
   * statement. All are sent with COMMIT.
   */
  finish(notify: string | null): void {
    if (this.#journey.length > 0) this.#insertEvents();
    if (this.polls.size > 0) {
      this.write('markPolls', [[...this.polls.keys()], [...this.polls.values()]]);
    }
    const dirty = [...this.agents].filter(([, a]) => a.dirty);
    const moved = [...this.seqs].filter(([, c]) => c.moved);
    if (dirty.length === 0 && moved.length === 0 && this.events.length === 0 && notify === null)
      return;
    const ev = this.events;
    this.write('finish', [
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
