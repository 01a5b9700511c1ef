/**
 * The sidecar's durable, bounded outbox (AGW_OUTBOX, SQLite): what the agent handed over while
 * the adapter could not take it, in acceptance order. A message is in the file before the agent
 * hears 202, and leaves it only after the adapter's 201 or 200 (or, refused for good, into the
 * local dead letters). Same file: the breaker's stored state and the inbox's memory.
 */
import Database from 'better-sqlite3';
import { SIDECAR_MIGRATIONS, SIDECAR_SQL } from '../store/sql.js';

export interface Queued {
  readonly seq: number;
  readonly idempotency_key: string;
  readonly body: string;
}

export class Outbox {
  readonly capacity: number;
  readonly #db: Database.Database;
  readonly #s;
  #depth: number;

  constructor(file: string, capacity: number) {
    this.capacity = capacity;
    this.#db = new Database(file);
    this.#db.pragma('journal_mode = WAL');
    // FULL, set and read back on every open: a 202 promises the message survives a crash of
    // the pod's node, not only of the process.
    this.#db.pragma('synchronous = FULL');
    if (this.#db.pragma('synchronous', { simple: true }) !== 2)
      throw new Error('synchronous=FULL did not take');
    const version = this.#db.pragma('user_version', { simple: true }) as number;
    if (version > SIDECAR_MIGRATIONS.length)
      throw new Error(`outbox schema ${version} is newer than this sidecar`);
    for (let v = version; v < SIDECAR_MIGRATIONS.length; v++) {
      this.#db.transaction(() => {
        this.#db.exec(SIDECAR_MIGRATIONS[v]!);
        this.#db.pragma(`user_version = ${v + 1}`);
      })();
    }
    const p = <T = unknown>(sql: string) => this.#db.prepare<unknown[], T>(sql);
    this.#s = {
      enqueue: p(SIDECAR_SQL.enqueue),
      depth: p<number>(SIDECAR_SQL.depth).pluck(),
      peek: p<Queued>(SIDECAR_SQL.peek),
      remove: p(SIDECAR_SQL.remove),
      deadLetter: p(SIDECAR_SQL.deadLetter),
      deadLetters: p<number>(SIDECAR_SQL.deadLetterCount).pluck(),
      getState: p<string>(SIDECAR_SQL.getState).pluck(),
      setState: p(SIDECAR_SQL.setState),
    };
    this.#depth = this.#s.depth.get() ?? 0;
  }

  get depth(): number {
    return this.#depth;
  }

  get full(): boolean {
    return this.#depth >= this.capacity;
  }

  /** Queues a message (committed, fsynced) unless full; a key already queued is not added twice. */
  enqueue(key: string, body: string, now = Date.now()): boolean {
    if (this.full) return false;
    const { changes } = this.#s.enqueue.run(key, body, now);
    this.#depth += changes;
    return true;
  }

  peek(limit: number): Queued[] {
    return this.#s.peek.all(limit);
  }

  /** Removes delivered messages and moves refused ones to the local dead letters, at once. */
  settle(
    delivered: readonly number[],
    refused: readonly { q: Queued; status: number; answer: string }[],
  ): void {
    this.#db.transaction(() => {
      for (const seq of delivered) this.#s.remove.run(seq);
      for (const r of refused) {
        this.#s.deadLetter.run(r.q.idempotency_key, r.q.body, r.status, r.answer, Date.now());
        this.#s.remove.run(r.q.seq);
      }
    })();
    this.#depth = this.#s.depth.get() ?? 0;
  }

  get deadLetters(): number {
    return this.#s.deadLetters.get() ?? 0;
  }

  getState<T>(key: string): T | undefined {
    const v = this.#s.getState.get(key);
    return v === undefined ? undefined : (JSON.parse(v) as T);
  }

  setState(key: string, value: unknown): void {
    this.#s.setState.run(key, JSON.stringify(value));
  }

  /** The connection, for the inbox's memory, which lives in the same file. */
  get database(): Database.Database {
    return this.#db;
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }
}
