/**
 * The sidecar's durable, bounded outbox: what the agent handed over while the adapter could not
 * take it, in acceptance order. A message is in the file (store/sidecar/sidecar-file.ts, fsynced) before
 * the agent hears 202, and leaves it only after the adapter's 201 or 200, or, refused for good,
 * into the local dead letters.
 */
import { parseEnvelope } from '../protocol/envelope.js';
import { fingerprint } from '../protocol/fingerprint.js';
import type {
  LocalDeadLetter,
  Queued,
  Refused,
  SidecarFile,
} from '../store/sidecar/sidecar-file.js';

export type { Queued, Refused } from '../store/sidecar/sidecar-file.js';

export class Outbox {
  readonly capacity: number;
  readonly #file: SidecarFile;
  #depth: number;

  constructor(file: SidecarFile, capacity: number) {
    this.capacity = capacity;
    this.#file = file;
    this.#depth = file.outboxDepth();
  }

  get depth(): number {
    return this.#depth;
  }

  get full(): boolean {
    return this.#depth >= this.capacity;
  }

  /**
   * Queues a message unless full. A key already queued is not added twice: the same message
   * again is `queued` (as the first was), another message under that key is a `conflict`.
   */
  enqueue(key: string, body: string, now = Date.now()): 'queued' | 'full' | 'conflict' {
    const prior = this.#file.queuedBody(key);
    if (prior !== undefined) return sameMessage(prior, body) ? 'queued' : 'conflict';
    if (this.full) return 'full';
    if (this.#file.enqueue(key, body, now)) this.#depth++;
    return 'queued';
  }

  /** When the message under `key` was queued, ms; undefined when it is not queued. */
  queuedAt(key: string): number | undefined {
    return this.#file.queuedAt(key);
  }

  /** The local dead letter under `key`, as deadLetterPage gives them; undefined if none. */
  deadLetter(key: string) {
    const d = this.#file.deadLetterByKey(key);
    return d === undefined ? undefined : view(d);
  }

  peek(limit: number): Queued[] {
    return this.#file.peek(limit);
  }

  /** Removes delivered messages and moves refused ones to the local dead letters, at once. */
  settle(delivered: readonly number[], refused: readonly Refused[]): void {
    this.#file.settle(delivered, refused, Date.now());
    this.#depth = this.#file.outboxDepth();
  }

  get deadLetters(): number {
    return this.#file.deadLetterCount();
  }

  /** The local dead letters with id > `after`, oldest first, at most `limit`. */
  deadLetterPage(after: number, limit: number) {
    return this.#file.deadLetterPage(after, limit).map(view);
  }
}

/** A local dead letter as the sidecar answers it. */
function view(d: LocalDeadLetter) {
  return {
    id: d.id,
    idempotency_key: d.idempotency_key,
    status: d.status,
    answer: JSON.parse(d.answer) as unknown,
    dead_lettered_at: new Date(d.created_at).toISOString(),
    message: JSON.parse(d.body) as unknown,
  };
}

/** The same message: what the sender chose (to, kind, priority, reply_to, payload) is equal. */
function sameMessage(a: string, b: string): boolean {
  const of = (body: string) => fingerprint(parseEnvelope(JSON.parse(body)));
  return of(a).equals(of(b));
}
