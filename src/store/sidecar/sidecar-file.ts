/**
 * The sidecar's own SQLite file (AGW_OUTBOX): its outbox and local dead letters, the breaker's
 * stored state, and inbox repair's memory (the last sequence handed over per channel, the
 * messages acked, the sidecar's own delivery ids). One connection, statements prepared once;
 * the rules that use them live in the sidecar (outbox.ts, inbox-repair.ts).
 *
 * Durability per write (docs/design/durability.md): a message taken into the outbox is committed
 * with synchronous=FULL, since the sidecar's 202 promises it survives a crash of the pod's node,
 * not only of the process. Every other write (inbox marks, acks remembered, copies, held
 * deliveries, the breaker's state, an outbox entry leaving) is committed with NORMAL: a power
 * loss can take back only such writes made since the last fsync of the WAL, which brings back a
 * delivery the agent may already have had (at-least-once) or sends an entry again under its key
 * (the adapter answers 200), never loses a message. Any FULL commit makes the NORMAL commits
 * before it durable too: the WAL is one file, fsynced whole.
 *
 * Two of those marks are written behind: the last sequence handed over per channel and the
 * messages the agent acked. They take effect in memory at once (handed() and isAcked() see them)
 * and reach the file in one commit (commitBehind()) that the sidecar makes before it answers
 * the agent: before a poll's answer hands deliveries over, before an ack is answered 2xx. So a
 * SIGKILL can never take back a mark the agent has seen the effect of: an ack answered 2xx is
 * never handed over again, also after a restart (docs/design/durability.md: with the marks written
 * 20 ms behind the answer, a sidecar killed within those milliseconds handed an acked message
 * over again after its restart). Marks no answer waits for (a send of the agent's own counted as
 * handed over) are written WRITE_BEHIND_MS after the first of them; losing one of those costs a
 * rescan that skips the agent's own messages, never a message.
 */
import type Database from 'better-sqlite3';
import { openSqlite } from '../sqlite/sqlite-file.js';
import { SIDECAR_MIGRATIONS, SIDECAR_SQL } from './sidecar-sql.js';

/**
 * How long a mark no answer waits for is written behind, ms: the marks made meanwhile share its
 * commit. Every answer to the agent commits what it depends on first (commitBehind()).
 */
export const WRITE_BEHIND_MS = 20;

/** A message waiting in the outbox, in acceptance order (seq). */
export interface Queued {
  readonly seq: number;
  readonly idempotency_key: string;
  readonly body: string;
}

/** A row of the local dead letters. */
export interface LocalDeadLetter {
  readonly id: number;
  readonly idempotency_key: string;
  readonly body: string;
  readonly status: number;
  readonly answer: string;
  readonly created_at: number;
}

/** A queued message the adapter refused for good, with its answer. */
export interface Refused {
  readonly q: Queued;
  readonly status: number;
  readonly answer: string;
}

/** A gap of a channel still to scan: messages after `after` and before `until`. */
export interface Gap {
  readonly channel: string;
  readonly after: number;
  readonly until: number;
}

/** A copy made from replay, with a lease of its own. */
export interface Copy {
  readonly id: number;
  readonly message_id: string;
  readonly channel: string;
  readonly seq: number;
  /** The message, as the adapter serves it. */
  readonly body: string;
  readonly lease_ms: number;
  /** 0: due now. */
  readonly lease_expires_at: number;
  readonly attempt: number;
}

export interface NewCopy {
  readonly messageId: string;
  readonly seq: number;
  readonly body: string;
  readonly leaseMs: number;
}

/** An adapter delivery held back behind a gap or an unacked copy of its channel. */
export interface Held {
  readonly message_id: string;
  readonly channel: string;
  readonly seq: number;
  /** The delivery, as the adapter served it. */
  readonly delivery: string;
}

/** A reply handed to an ask, out of its channel's order. */
export interface Taken {
  readonly message_id: string;
  readonly channel: string;
  readonly seq: number;
  /** The adapter's delivery id it was handed with (the latest, if handed again). */
  readonly delivery: number;
}

export interface SidecarFileOptions {
  /**
   * A write-behind commit failed (a full disk): its marks stay in memory and go with the next
   * one. Without it the error is dropped, since the marks are still in force in memory.
   */
  readonly onWriteError?: (err: unknown) => void;
}

export class SidecarFile {
  readonly #db: Database.Database;
  readonly #s;
  /**
   * Runs its argument in one transaction. Made once: better-sqlite3's transaction() builds a
   * new wrapper (with its property definitions) per call, which showed in the receive path.
   */
  readonly #inTx: (work: () => void) => void;
  /** The handed marks read or written so far (asked at every send): the file's, in memory. */
  readonly #handed = new Map<string, number | undefined>();
  /** Marks written behind (see above), waiting for their commit. */
  #behind = newBehind();
  /** The commit of the marks waiting, due WRITE_BEHIND_MS after the first of them. */
  #behindTimer: NodeJS.Timeout | undefined;
  readonly #onWriteError: (err: unknown) => void;
  /**
   * The replies handed to an ask, by message_id (all of them, read at open: an ask's reply is
   * one message per ask, forgotten with the acks), and by channel and sequence.
   */
  readonly #taken = new Map<string, Taken & { readonly at: number }>();
  readonly #takenSeqs = new Map<string, Set<number>>();
  readonly #takenByDelivery = new Map<number, string>();

  constructor(file: string, opts: SidecarFileOptions = {}) {
    this.#onWriteError = opts.onWriteError ?? (() => {});
    this.#db = openSqlite(file, {
      sync: 'normal',
      migrations: SIDECAR_MIGRATIONS,
      program: 'sidecar',
    });
    this.#inTx = this.#db.transaction((work: () => void) => work());
    const p = <T = unknown>(sql: string) => this.#db.prepare<unknown[], T>(sql);
    this.#s = {
      enqueue: p(SIDECAR_SQL.enqueue),
      depth: p<number>(SIDECAR_SQL.depth).pluck(),
      peek: p<Queued>(SIDECAR_SQL.peek),
      remove: p(SIDECAR_SQL.remove),
      deadLetter: p(SIDECAR_SQL.deadLetter),
      deadLetters: p<number>(SIDECAR_SQL.deadLetterCount).pluck(),
      deadLetterPage: p<LocalDeadLetter>(SIDECAR_SQL.deadLetterPage),
      queuedBody: p<string>(SIDECAR_SQL.queuedBody).pluck(),
      queuedAt: p<number>(SIDECAR_SQL.queuedAt).pluck(),
      deadLetterByKey: p<LocalDeadLetter>(SIDECAR_SQL.deadLetterByKey),
      getState: p<string>(SIDECAR_SQL.getState).pluck(),
      setState: p(SIDECAR_SQL.setState),
      handed: p<number>(SIDECAR_SQL.handedSeq).pluck(),
      setHanded: p(SIDECAR_SQL.setHanded),
      isAcked: p<number>(SIDECAR_SQL.isAcked).pluck(),
      markAcked: p(SIDECAR_SQL.markAcked),
      pruneAcked: p(SIDECAR_SQL.pruneAcked),
      localDelivery: p<{ message_id: string; done: number }>(SIDECAR_SQL.localDelivery),
      gaps: p<Gap>(SIDECAR_SQL.gaps),
      setGap: p(SIDECAR_SQL.setGap),
      dropGap: p(SIDECAR_SQL.dropGap),
      addCopy: p(SIDECAR_SQL.addCopy),
      openCopies: p<Copy>(SIDECAR_SQL.openCopies),
      leaseCopy: p(SIDECAR_SQL.leaseCopy),
      copyDue: p(SIDECAR_SQL.copyDue),
      copyLeased: p(SIDECAR_SQL.copyLeased),
      extendCopy: p(SIDECAR_SQL.extendCopy),
      copyDone: p(SIDECAR_SQL.copyDone),
      hold: p(SIDECAR_SQL.hold),
      heldAll: p<Held>(SIDECAR_SQL.heldAll),
      unhold: p(SIDECAR_SQL.unhold),
      markTaken: p(SIDECAR_SQL.markTaken),
      pruneTaken: p(SIDECAR_SQL.pruneTaken),
    };
    for (const t of p<Taken & { at: number }>(SIDECAR_SQL.takenAll).all()) this.#rememberTaken(t);
  }

  // the outbox

  /** Adds a message (committed, fsynced); false when its key is already queued. */
  enqueue(key: string, body: string, now: number): boolean {
    this.#db.pragma('synchronous = FULL');
    try {
      return this.#s.enqueue.run(key, body, now).changes === 1;
    } finally {
      this.#db.pragma('synchronous = NORMAL');
    }
  }

  outboxDepth(): number {
    return this.#s.depth.get() ?? 0;
  }

  peek(limit: number): Queued[] {
    return this.#s.peek.all(limit);
  }

  /** Removes delivered messages and moves refused ones to the local dead letters, at once. */
  settle(delivered: readonly number[], refused: readonly Refused[], now: number): void {
    this.#inTx(() => {
      for (const seq of delivered) this.#s.remove.run(seq);
      for (const r of refused) {
        this.#s.deadLetter.run(r.q.idempotency_key, r.q.body, r.status, r.answer, now);
        this.#s.remove.run(r.q.seq);
      }
    });
  }

  /** The body queued under `key`, if one is. */
  queuedBody(key: string): string | undefined {
    return this.#s.queuedBody.get(key);
  }

  /** When the message under `key` was queued, ms; undefined when it is not in the outbox. */
  queuedAt(key: string): number | undefined {
    return this.#s.queuedAt.get(key);
  }

  /** The latest local dead letter under `key`, if any. */
  deadLetterByKey(key: string): LocalDeadLetter | undefined {
    return this.#s.deadLetterByKey.get(key);
  }

  deadLetterPage(after: number, limit: number): LocalDeadLetter[] {
    return this.#s.deadLetterPage.all(after, limit);
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
    if (!this.#handed.has(channel)) this.#handed.set(channel, this.#s.handed.get(channel));
    return this.#handed.get(channel);
  }

  /** Moves the channels' marks forward (never back): at once here, written behind. */
  setHanded(marks: ReadonlyMap<string, number>): void {
    if (marks.size === 0) return;
    const { handed } = this.#behind;
    for (const [channel, seq] of marks) {
      const last = this.handed(channel);
      const next = last === undefined ? seq : Math.max(last, seq);
      this.#handed.set(channel, next);
      handed.set(channel, next);
    }
    this.#writeBehind();
  }

  isAcked(messageId: string): boolean {
    return this.#behind.acked.has(messageId) || this.#s.isAcked.get(messageId) !== undefined;
  }

  /**
   * Remembers these messages as acked, at once here, written behind; forgets acks older than
   * `forgetBefore`, if given, with them.
   */
  markAcked(messageIds: readonly string[], now: number, forgetBefore?: number): void {
    const behind = this.#behind;
    for (const m of messageIds) if (!behind.acked.has(m)) behind.acked.set(m, now);
    if (forgetBefore !== undefined)
      behind.forgetBefore = Math.max(behind.forgetBefore ?? forgetBefore, forgetBefore);
    this.#writeBehind();
  }

  /**
   * Writes the marks waiting behind, in one commit, now; throws if the commit fails (the marks
   * stay in memory, for the next). The sidecar calls it before an answer that depends on them.
   */
  commitBehind(): void {
    clearTimeout(this.#behindTimer);
    this.#behindTimer = undefined;
    const b = this.#behind;
    if (b.handed.size === 0 && b.acked.size === 0 && b.forgetBefore === undefined) return;
    this.#inTx(() => {
      for (const [channel, seq] of b.handed) this.#s.setHanded.run(channel, seq);
      for (const [m, at] of b.acked) this.#s.markAcked.run(m, at);
      if (b.forgetBefore !== undefined) {
        this.#s.pruneAcked.run(b.forgetBefore);
        this.#s.pruneTaken.run(b.forgetBefore);
      }
    });
    this.#behind = newBehind();
    if (b.forgetBefore !== undefined) this.#forgetTaken(b.forgetBefore);
  }

  /**
   * commitBehind() from the timer, WRITE_BEHIND_MS after the first mark, and before the file
   * closes: a failed commit is reported and keeps its marks for the next.
   */
  flushBehind(): void {
    try {
      this.commitBehind();
    } catch (err) {
      this.#onWriteError(err);
    }
  }

  #writeBehind(): void {
    if (this.#behindTimer !== undefined) return;
    this.#behindTimer = setTimeout(() => this.flushBehind(), WRITE_BEHIND_MS);
    this.#behindTimer.unref(); // close() writes what waits
  }

  /**
   * A reply handed to an ask (`delivery`, the adapter's id it came with), committed now: the
   * ask's answer waits for it. Counts as handed over from now on (isTaken, takenAt).
   */
  markTaken(t: Taken, now: number): void {
    this.#s.markTaken.run(t.message_id, t.channel, t.seq, t.delivery, now);
    this.#rememberTaken({ ...t, at: this.#taken.get(t.message_id)?.at ?? now });
  }

  /** Whether the message was handed to an ask (and is not forgotten yet). */
  isTaken(messageId: string): boolean {
    return this.#taken.has(messageId);
  }

  /** Whether number `seq` of `channel` was handed to an ask. */
  takenAt(channel: string, seq: number): boolean {
    return this.#takenSeqs.get(channel)?.has(seq) === true;
  }

  /** The message an ask was handed with this adapter delivery id, if one was. */
  takenDelivery(deliveryId: number): string | undefined {
    return this.#takenByDelivery.get(deliveryId);
  }

  #rememberTaken(t: Taken & { readonly at: number }): void {
    this.#taken.set(t.message_id, t);
    this.#takenByDelivery.set(t.delivery, t.message_id);
    let seqs = this.#takenSeqs.get(t.channel);
    if (seqs === undefined) {
      seqs = new Set();
      this.#takenSeqs.set(t.channel, seqs);
    }
    seqs.add(t.seq);
  }

  /** Forgets, in memory, the replies taken before `before` (the file's went in the commit). */
  #forgetTaken(before: number): void {
    for (const [id, t] of this.#taken) {
      if (t.at >= before) continue;
      this.#taken.delete(id);
      this.#takenByDelivery.delete(t.delivery);
      this.#takenSeqs.get(t.channel)?.delete(t.seq);
    }
  }

  /** Copy `id` (a sidecar delivery id, made positive): its message, and whether it is done. */
  localDelivery(id: number): { message_id: string; done: number } | undefined {
    return this.#s.localDelivery.get(id);
  }

  // inbox repair: gaps being scanned, copies with leases, held deliveries

  gaps(): Gap[] {
    return this.#s.gaps.all();
  }

  /**
   * One scanned page of a gap, at once: the copies it made, and where the scan goes on (or,
   * `after` undefined, that the gap is done).
   */
  gapPage(channel: string, copies: readonly NewCopy[], after: number | undefined, until: number) {
    this.#inTx(() => {
      for (const c of copies)
        this.#s.addCopy.run(c.messageId, channel, c.seq, c.body, Math.round(c.leaseMs));
      if (after === undefined) this.#s.dropGap.run(channel);
      else this.#s.setGap.run(channel, after, until);
    });
  }

  openCopies(): Copy[] {
    return this.#s.openCopies.all();
  }

  heldAll(): Held[] {
    return this.#s.heldAll.all();
  }

  /** Holds an adapter delivery back (a newer delivery of the same message replaces it). */
  hold(h: Held): void {
    this.#s.hold.run(h.message_id, h.channel, h.seq, h.delivery);
  }

  /** What one answer to the agent handed over, at once: copies leased, held ones let go. */
  handOver(
    copies: readonly { id: number; leaseExpiresAt: number }[],
    unheld: readonly string[],
  ): void {
    if (copies.length === 0 && unheld.length === 0) return;
    this.#inTx(() => {
      for (const c of copies) this.#s.leaseCopy.run(c.leaseExpiresAt, c.id);
      for (const m of unheld) this.#s.unhold.run(m);
    });
  }

  /** Whether copy `id` is handed over, leased past `now`, and not done. */
  copyLeased(id: number, now: number): boolean {
    return this.#s.copyLeased.get(id, now) !== undefined;
  }

  /** Their leases now end at `expires`. */
  extendCopies(ids: readonly number[], expires: number): void {
    this.#inTx(() => {
      for (const id of ids) this.#s.extendCopy.run(expires, id);
    });
  }

  /** A copy nacked for a retry: due again at once. */
  copyDue(id: number): boolean {
    return this.#s.copyDue.run(id).changes === 1;
  }

  /** A copy acked, or rejected: never handed again. */
  copyDone(id: number): void {
    this.#s.copyDone.run(id);
  }

  close(): void {
    if (!this.#db.open) return;
    this.flushBehind();
    this.#db.close();
  }
}

/** Marks written behind: handed marks per channel, acked message ids with their time. */
interface Behind {
  readonly handed: Map<string, number>;
  readonly acked: Map<string, number>;
  forgetBefore: number | undefined;
}

function newBehind(): Behind {
  return { handed: new Map(), acked: new Map(), forgetBefore: undefined };
}
