/**
 * The sidecar's durable, bounded outbox: what the agent handed over while the adapter could not
 * take it, in acceptance order. A message is in the file (store/sidecar-file.ts, fsynced) before
 * the agent hears 202, and leaves it only after the adapter's 201 or 200, or, refused for good,
 * into the local dead letters.
 */
import type { Queued, Refused, SidecarFile } from '../store/sidecar-file.js';

export type { Queued, Refused } from '../store/sidecar-file.js';

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

  /** Queues a message unless full; a key already queued is not added twice. */
  enqueue(key: string, body: string, now = Date.now()): boolean {
    if (this.full) return false;
    if (this.#file.enqueue(key, body, now)) this.#depth++;
    return true;
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
}
