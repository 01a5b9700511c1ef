/**
 * What paged answers (replay, threads, dead letters, the inbox) may hold of the adapter's memory.
 * Before, 40 replays of 8 MiB pages whose clients never read
 * took a SQLite adapter from 111 to 915 MiB and held it there: nothing bounded the answers in
 * flight, and no answer had a deadline once its request had arrived.
 *
 * - Each agent may have AGW_MAX_READS_PER_AGENT (4) replay, thread and dead-letter reads open
 *   (`AgentSlots`); past it 429 `too_many_reads` with Retry-After. A slot is held until the answer
 *   has gone out or the connection closed, not merely until it was built.
 * - All answers in flight together may hold AGW_MAX_RESPONSE_BYTES (128 MiB; `ResponseBudget`): a
 *   read takes a whole page's bound before it reads (so concurrent reads cannot all pass it at
 *   once), then what its answer really holds; past it 503 `overloaded` with Retry-After. An inbox
 *   answer is counted but never refused: what it leased must go out.
 * - An answer is written a chunk at a time as the client takes it (backpressure: each part is let
 *   go once written), and must be taken within AGW_WRITE_TIMEOUT_MS (30 s: 8 MiB at 280 KB/s);
 *   else its connection is cut, and its slot and bytes are freed.
 */
import type { ServerResponse } from 'node:http';
import { GatewayError } from '../protocol/errors.js';
import type { EventMap, ListenerErrors } from '../protocol/events.js';

export interface ResponseEvents {
  /** A client did not take its answer within AGW_WRITE_TIMEOUT_MS: its connection was cut. */
  'response:timeout': [bytes: number];
  /** A read was refused: the answers in flight held AGW_MAX_RESPONSE_BYTES. */
  'response:overloaded': [inFlight: number];
}

/** Writes are gathered into chunks of this, so a page of small messages is not 1,000 writes. */
const CHUNK_CHARS = 64 * 1024;

export class ResponseBudget {
  #inFlight = 0;

  constructor(
    /** AGW_MAX_RESPONSE_BYTES. */
    readonly maxBytes: number,
    /** AGW_WRITE_TIMEOUT_MS. */
    readonly writeTimeoutMs: number,
    /** Where 'response:timeout' and 'response:overloaded' are told (the adapter's event map). */
    readonly events?: Pick<EventMap<ResponseEvents & ListenerErrors>, 'emit'>,
  ) {}

  /** Bytes of answers being built or sent now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * Takes `bytes` for the answer `res` is about to get, until it closes; 503 overloaded when
   * that would pass the bound (`force`: counted all the same, for answers that must go out).
   */
  reserve(res: ServerResponse, bytes: number, force = false): Reservation {
    if (!force && this.#inFlight + bytes > this.maxBytes) {
      this.events?.emit('response:overloaded', this.#inFlight);
      throw new GatewayError(
        'overloaded',
        `answers of ${this.#inFlight} bytes are in flight already (AGW_MAX_RESPONSE_BYTES ${this.maxBytes}); retry shortly`,
        { retryAfterS: 1 },
      );
    }
    this.#inFlight += bytes;
    let held = bytes;
    let gone = false;
    res.once('close', () => {
      this.#inFlight -= held;
      gone = true;
    });
    return {
      resize: (n: number) => {
        if (gone) return; // already given back
        this.#inFlight += n - held;
        held = n;
      },
    };
  }

  /**
   * Sends JSON made of `parts` (joined, they are the body) as the client takes it: each chunk
   * waits for the one before to drain, and the whole answer for AGW_WRITE_TIMEOUT_MS at most,
   * after which the connection is cut. `reservation` is set to the answer's real size.
   */
  async send(
    res: ServerResponse,
    reservation: Reservation,
    parts: string[],
    status = 200,
  ): Promise<void> {
    // a client gone already (a long poll whose connection closed while it waited): nothing to
    // send, and no write timer, which would hold the process for AGW_WRITE_TIMEOUT_MS at its exit
    // and then report a slow client that is not there
    if (res.destroyed) return;
    let length = 0;
    for (const p of parts) length += Buffer.byteLength(p);
    reservation.resize(length);
    const timer = setTimeout(() => {
      this.events?.emit('response:timeout', length);
      res.destroy();
    }, this.writeTimeoutMs);
    res.once('close', () => clearTimeout(timer));
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': length,
    });
    let chunk = '';
    for (let i = 0; i < parts.length; i++) {
      chunk += parts[i];
      parts[i] = ''; // let go of it once written: memory falls as the client reads
      if (chunk.length < CHUNK_CHARS && i < parts.length - 1) continue;
      if (res.destroyed) return;
      const drained = res.write(chunk);
      chunk = '';
      if (!drained) await drainOrClose(res);
    }
    if (!res.destroyed) res.end();
  }
}

export interface Reservation {
  /** The answer holds `bytes` (not the page's bound it was taken for). */
  resize(bytes: number): void;
}

function drainOrClose(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

/** A JSON page as parts: `head`, the items with their commas, `tail`. */
export function pageParts(head: string, items: readonly string[], tail: string): string[] {
  const parts = [head];
  for (const [i, item] of items.entries()) parts.push(i === 0 ? item : `,${item}`);
  parts.push(tail);
  return parts;
}

/**
 * Concurrent requests of one kind per agent. Past `max` the request is refused at once with
 * 429 and Retry-After: 1 (`refuse` says with which code and words).
 */
export class AgentSlots {
  readonly #open = new Map<string, number>();

  constructor(
    readonly max: number,
    readonly refuse: (agent: string, open: number) => GatewayError,
  ) {}

  enter(agent: string): void {
    const n = this.#open.get(agent) ?? 0;
    if (n >= this.max) throw this.refuse(agent, n);
    this.#open.set(agent, n + 1);
  }

  leave(agent: string): void {
    const n = (this.#open.get(agent) ?? 1) - 1;
    if (n === 0) this.#open.delete(agent);
    else this.#open.set(agent, n);
  }

  /** Enters, and leaves when `res` closes: the answer went out, or its connection is gone. */
  hold(agent: string, res: ServerResponse): void {
    this.enter(agent);
    res.once('close', () => this.leave(agent));
  }
}
