/**
 * The sidecar's own SQLite file (AGW_OUTBOX): its outbox and local dead letters, the breaker's
 * stored state, and inbox repair's memory (the last sequence handed over per channel, the
 * messages acked, the sidecar's own delivery ids). One connection, statements prepared once;
 * the rules that use them live in the sidecar (outbox.ts, inbox-repair.ts).
 *
 * synchronous=FULL: a 202 from the sidecar promises the message survives a crash of the pod's
 * node, not only of the process.
 */
import type Database from 'better-sqlite3';
import { SIDECAR_MIGRATIONS, SIDECAR_SQL } from './sql.js';
import { openSqlite } from './sqlite-file.js';

/** A message waiting in the outbox, in acceptance order (seq). */
export interface Queued {
  readonly seq: number;
  readonly idempotency_key: string;
  readonly body: string;
}

/** A queued message the adapter refused for good, with its answer. */
export interface Refused {
  readonly q: Queued;
  readonly status: number;
  readonly answer: string;
}

export class SidecarFile {
  readonly #db: Database.Database;
  readonly #s;

  constructor(file: string) {
    this.#db = openSqlite(file, {
      sync: 'full',
      migrations: SIDECAR_MIGRATIONS,
      program: 'sidecar',
    });
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
      handed: p<number>(SIDECAR_SQL.handedSeq).pluck(),
      setHanded: p(SIDECAR_SQL.setHanded),
      isAcked: p<number>(SIDECAR_SQL.isAcked).pluck(),
      markAcked: p(SIDECAR_SQL.markAcked),
      pruneAcked: p(SIDECAR_SQL.pruneAcked),
      localDelivery: p<{ id: number }>(SIDECAR_SQL.localDelivery),
      localMessage: p<string>(SIDECAR_SQL.localDeliveryMessage).pluck(),
    };
  }

  // the outbox

  /** Adds a message (committed, fsynced); false when its key is already queued. */
  enqueue(key: string, body: string, now: number): boolean {
    return this.#s.enqueue.run(key, body, now).changes === 1;
  }

  outboxDepth(): number {
    return this.#s.depth.get() ?? 0;
  }

  peek(limit: number): Queued[] {
    return this.#s.peek.all(limit);
  }

  /** Removes delivered messages and moves refused ones to the local dead letters, at once. */
  settle(delivered: readonly number[], refused: readonly Refused[], now: number): void {
    this.#db.transaction(() => {
      for (const seq of delivered) this.#s.remove.run(seq);
      for (const r of refused) {
        this.#s.deadLetter.run(r.q.idempotency_key, r.q.body, r.status, r.answer, now);
        this.#s.remove.run(r.q.seq);
      }
    })();
  }

  deadLetterCount(): number {
    return this.#s.deadLetters.get() ?? 0;
  }

  // stored state (the breaker's)

  getState<T>(key: string): T | undefined {
    const v = this.#s.getState.get(key);
    return v === undefined ? undefined : (JSON.parse(v) as T);
  }

  setState(key: string, value: unknown): void {
    this.#s.setState.run(key, JSON.stringify(value));
  }

  // inbox repair's memory

  /** The last channel_sequence_id handed to the agent in `channel`, if any. */
  handed(channel: string): number | undefined {
    return this.#s.handed.get(channel);
  }

  /** Moves the channels' marks forward (never back), in one transaction. */
  setHanded(marks: ReadonlyMap<string, number>): void {
    this.#db.transaction(() => {
      for (const [channel, seq] of marks) this.#s.setHanded.run(channel, seq);
    })();
  }

  isAcked(messageId: string): boolean {
    return this.#s.isAcked.get(messageId) !== undefined;
  }

  /** Remembers these messages as acked; forgets acks older than `forgetBefore`, if given. */
  markAcked(messageIds: readonly string[], now: number, forgetBefore?: number): void {
    this.#db.transaction(() => {
      for (const m of messageIds) this.#s.markAcked.run(m, now);
      if (forgetBefore !== undefined) this.#s.pruneAcked.run(forgetBefore);
    })();
  }

  /** A delivery id of the sidecar's own (positive here; the agent sees it negated). */
  localDelivery(messageId: string): number {
    return this.#s.localDelivery.get(messageId)!.id;
  }

  localDeliveryMessage(id: number): string | undefined {
    return this.#s.localMessage.get(id);
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }
}
