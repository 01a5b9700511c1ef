/**
 * A bound on the reads of one kind that may hold connections of a pool at once, so that the
 * rest of the pool stays free for the others. On PostgreSQL, 48 concurrent replays queued for
 * the 4-connection read pool took /health from 1 ms to 439-469 ms and a send's `isStored` from
 * 2 ms to 413-533 ms: page reads now wait here, before the
 * pool, for one of `size` slots, and /health and the send path find a connection at once.
 */
export class ReadSlots {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(readonly size: number) {
    this.#free = size;
  }

  /** Runs `read` once a slot is free (in arrival order), and frees it after. */
  async run<T>(read: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await read();
    } finally {
      const next = this.#waiting.shift();
      if (next === undefined) this.#free++;
      else next(); // the slot passes straight on
    }
  }
}
