/**
 * The sidecar's send path: forward to the adapter through the breaker when that can work,
 * otherwise keep the message in the outbox; and the drain that empties the outbox, in order,
 * once the adapter is back.
 *
 * A send goes into the outbox when the breaker is open, when the adapter fails retryably, or
 * whenever the outbox is not empty, so that a message never overtakes one accepted before it.
 * (Two sends in flight at once have no order between them; the order is that of acceptance.)
 *
 * A 429 (the sender's rate at the adapter) is retryable like a 503 but says only "slower": it
 * never counts against the breaker (circuit-breaker.ts) nor raises a CRIT entry; the message
 * waits in the outbox and the drain comes back after the Retry-After (`retry_after_s` of a
 * batch entry), stopping at the first refused entry so that the order holds.
 */
import type { Logger } from 'pino';
import { GatewayError, isRetryableAnswer } from '../protocol/errors.js';
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_BATCH } from '../protocol/limits.js';
import { sent } from '../telemetry/messaging.js';
import { MESSAGING_SYSTEM, type Span, type Tracing } from '../telemetry/tracing.js';
import { type AdapterClient, type AdapterResponse, RetryableAnswer } from './adapter-client.js';
import { type BackoffOptions, backoff } from './backoff.js';
import type { AdapterBreaker } from './circuit-breaker.js';
import type { SidecarEventMap } from './events.js';
import type { Outbox, Queued, Refused } from './outbox.js';

export type SendAnswer = { status: number; body: string | object; retryAfterS?: number };

export interface ForwarderOptions {
  readonly client: AdapterClient;
  readonly breaker: AdapterBreaker;
  readonly outbox: Outbox;
  /** Where the forwarder tells 'send:assigned', 'outbox:full' and 'outbox:dead-letter'. */
  readonly events: SidecarEventMap;
  readonly logger: Logger;
  /** Backoff of the drain while the adapter is away. */
  readonly backoff: BackoffOptions;
  /** Spans: a queued message's forwarding, in its own trace. Default none. */
  readonly tracing?: Tracing;
}

/** Whole-batch failures of the same head before the batch is halved, or a lone entry set aside. */
const STRIKES = 3;
/** How many times longer than its bytes an envelope may serialize, rounded up (see send). */
const RAW_GROWTH = 6;
/** Send requests to the adapter in flight at once; what arrives meanwhile waits for the next. */
const FLYING = 2;

/** A send waiting for a place in a request to the adapter. */
interface Waiting {
  readonly key: string;
  /** The envelope as it goes to the adapter: the agent's bytes, or serialized. */
  readonly body: string | Buffer;
  readonly size: number;
  readonly resolve: (answer: SendAnswer) => void;
}

/** One entry of the adapter's batch answer: the single answer's fields, with its status. */
type BatchResult = {
  status: number;
  error?: string;
  channel?: string;
  channel_sequence_id?: number;
  /** A 429's Retry-After, seconds. */
  retry_after_s?: unknown;
} & Record<string, unknown>;

export class Forwarder {
  /**
   * The adapter's largest message, bytes: learned at start (GET /v1/me); what is larger is
   * refused at once (413), never queued, since the adapter would refuse it for good.
   */
  maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES;
  readonly #o: ForwarderOptions;
  #draining: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #delayStep = 0;
  #stopped = false;
  /** Entries per drain batch: halved on a batch's repeated failure, doubled back on success. */
  #batchSize = MAX_BATCH;
  /** The head (outbox seq) of the batch that failed last, and how many times in a row. */
  #struck = { seq: -1, times: 0 };
  /** Sends waiting for a request to the adapter, in arrival order. */
  #waiting: Waiting[] = [];
  #flying = 0;
  /**
   * Until when (ms) the adapter asked the drain to wait (a Retry-After): a send that goes
   * through meanwhile does not start the drain early, as it does after an outage.
   */
  #holdUntil = 0;

  constructor(opts: ForwarderOptions) {
    this.#o = opts;
  }

  /** Drains in a row that failed (0 once one succeeds): a queued message's tries, for its journey. */
  get failedDrains(): number {
    return this.#delayStep;
  }

  /**
   * Sends one envelope, already checked and carrying its idempotency key; answers as
   * docs/reference/sidecar.md ("Sending: POST /v1/messages") says. Sends that arrive while the
   * adapter is busy with earlier ones travel together in one batch request (see #pump); each is
   * answered as if alone.
   * `raw`: the envelope's bytes as the agent sent them (without `sender`), forwarded as they
   * are when they are well within the adapter's bound. The adapter judges a batch entry's size
   * on the entry serialized again, which can be longer than the bytes sent only through
   * numbers spelled short (`9e15` serializes as 16 bytes; no number grows more than 5.25
   * times); so bytes up to a sixth of the bound are within it either way, and larger ones are
   * judged, and sent, serialized, as every envelope was before.
   */
  send(
    envelope: Record<string, unknown> & { idempotency_key: string },
    raw?: Buffer,
  ): Promise<SendAnswer> {
    const key = envelope.idempotency_key;
    let body: string | Buffer;
    let size: number;
    if (raw !== undefined && raw.length * RAW_GROWTH <= this.maxMessageBytes) {
      body = raw;
      size = raw.length;
    } else {
      body = JSON.stringify({ ...envelope, sender: undefined });
      size = Buffer.byteLength(body);
    }
    if (size > this.maxMessageBytes) {
      const err = new GatewayError(
        'payload_too_large',
        `the message is ${size} bytes; the adapter takes at most ${this.maxMessageBytes}`,
      );
      return Promise.resolve({ status: err.status, body: err.toJSON() });
    }
    const { outbox, breaker } = this.#o;
    if (outbox.depth > 0 || breaker.state === 'open')
      return Promise.resolve(this.#queue(key, body));
    return new Promise((resolve) => {
      this.#waiting.push({ key, body, size, resolve });
      this.#pump();
    });
  }

  /**
   * Forwards what waits, at most FLYING requests at a time: a send that finds a free slot goes
   * at once, alone; sends that arrive while every slot is busy go together in the next batch
   * (up to MAX_BATCH entries and the adapter's batch bytes), as the adapter's group commit
   * gathers one turn's writes. Sends in flight together have no order between them, as before.
   */
  #pump(): void {
    const budget = this.maxMessageBytes * MAX_BATCH - 64;
    while (this.#flying < FLYING && this.#waiting.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.#waiting.length && n < MAX_BATCH) {
        const size = this.#waiting[n]!.size + 1;
        if (n > 0 && bytes + size > budget) break;
        bytes += size;
        n++;
      }
      const batch = this.#waiting.splice(0, n);
      this.#flying++;
      this.#forward(batch).finally(() => {
        this.#flying--;
        this.#pump();
      });
    }
  }

  /** One batch request for waiting sends; each send is answered from its own result. */
  async #forward(batch: readonly Waiting[]): Promise<void> {
    let res: AdapterResponse;
    try {
      res = await this.#call('POST', '/v1/messages/batch', batchBody(batch));
    } catch (err) {
      const after = err instanceof RetryableAnswer ? err.response.retryAfterS : undefined;
      for (const w of batch) w.resolve(this.#queue(w.key, w.body, after));
      return;
    }
    if (res.status !== 200) {
      // refused whole (a revoked token, a proxy's answer): each send hears it as it is
      for (const w of batch) w.resolve({ status: res.status, body: res.body });
      return;
    }
    const { results } = JSON.parse(res.body) as { results: BatchResult[] };
    batch.forEach((w, i) => {
      const r = results[i];
      if (r === undefined || isRetryableAnswer(r.status, r.error)) {
        w.resolve(this.#queue(w.key, w.body, retryAfterOf(r)));
        return;
      }
      const { status, ...answer } = r;
      if (status === 201 || status === 200) {
        this.#assigned(answer);
        w.resolve({ status, body: JSON.stringify({ status: 'delivered', ...answer }) });
      } else w.resolve({ status, body: JSON.stringify(answer) });
    });
  }

  #assigned(ack: { channel?: unknown; channel_sequence_id?: unknown }): void {
    if (typeof ack.channel === 'string' && typeof ack.channel_sequence_id === 'number') {
      this.#o.events.emit('send:assigned', ack.channel, ack.channel_sequence_id);
    }
  }

  /** Starts draining now if there is something to drain and no drain is running. */
  kick(): void {
    if (this.#stopped || this.#draining !== undefined || this.#o.outbox.depth === 0) return;
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#draining = this.#drain().then(
      (retryAfterS) => {
        this.#draining = undefined;
        if (retryAfterS !== undefined) this.#schedule(retryAfterS === 0 ? undefined : retryAfterS);
      },
      (err: unknown) => {
        this.#draining = undefined;
        this.#o.logger.error({ err }, 'drain failed');
        this.#schedule();
      },
    );
  }

  /** Waits for the drain in progress (shutdown: one last try). */
  async settled(): Promise<void> {
    await this.#draining;
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  /** One adapter call through the breaker; a retryable answer is thrown (and counted). */
  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: string | Buffer,
  ): Promise<AdapterResponse> {
    const res = await this.#o.breaker.fire(async () => {
      const r = await this.#o.client.request(method, path, body);
      if (r.retryable) throw new RetryableAnswer(r);
      return r;
    });
    // any success shows the adapter is back; a Retry-After is still honoured
    if (Date.now() >= this.#holdUntil) this.kick();
    return res;
  }

  /** Into the outbox; the drain is due after `retryAfterS` when the adapter said so. */
  #queue(key: string, body: string | Buffer, retryAfterS?: number): SendAnswer {
    const { outbox, events } = this.#o;
    const taken = outbox.enqueue(key, typeof body === 'string' ? body : body.toString('utf8'));
    if (taken === 'conflict') {
      const err = new GatewayError(
        'idempotency_conflict',
        `idempotency_key ${key} is already queued here for a different message`,
        { field: 'idempotency_key' },
      );
      return { status: err.status, body: err.toJSON() };
    }
    if (taken === 'full') {
      events.emit('outbox:full', { depth: outbox.depth, capacity: outbox.capacity });
      const err = new GatewayError(
        'outbox_full',
        `the outbox holds ${outbox.depth} messages, its bound; this one was not taken`,
        { retryAfterS: 5 },
      );
      return { status: err.status, body: err.toJSON(), retryAfterS: 5 };
    }
    this.#schedule(retryAfterS);
    return {
      status: 202,
      body: { status: 'queued', idempotency_key: key, outbox_depth: outbox.depth },
    };
  }

  /**
   * Sends the outbox in order, in batches of at most 100 entries and of the bytes the adapter's
   * batch endpoint takes, until it is empty or the adapter fails. A batch the adapter refuses
   * whole is never retried unchanged forever: a 413 halves it at once, any other whole-batch
   * refusal (a 400, a 500) of the same head three times in a row halves it, and a lone entry
   * refused so is set aside in the local dead letters with a CRIT entry: the rest flows on. An
   * adapter that is away (no answer, 503, 429) only delays the drain, and so does an entry
   * answered retryably (a 429 of the sender's rate, with every entry after it): the drain keeps
   * it and the rest, in order, and comes back after its `retry_after_s`. Resolves with undefined
   * when done, else when to try again: 0 for the backoff, n for Retry-After n s.
   */
  async #drain(): Promise<number | undefined> {
    const { outbox, client } = this.#o;
    while (!this.#stopped && outbox.depth > 0) {
      if (this.#o.breaker.state === 'open' && !(await client.health())) return 0;
      const batch = this.#nextBatch();
      const spans = this.#o.tracing?.on ? batch.map((q) => this.#forwardSpan(q)) : undefined;
      try {
        const retry = await this.#drainBatch(batch, spans);
        if (retry !== 'next') return retry;
      } catch (err) {
        for (const span of spans ?? []) span.fail(err);
        throw err;
      } finally {
        for (const span of spans ?? []) span.end();
      }
    }
    return undefined;
  }

  /**
   * A queued message's later forwarding: `forward <to>`, a child of its stored creation context,
   * so that the trace goes on where the outage interrupted it.
   */
  #forwardSpan(q: Queued): Span {
    const e = JSON.parse(q.body) as { to?: string; traceparent?: string; tracestate?: string };
    const parent =
      typeof e.traceparent === 'string'
        ? { traceparent: e.traceparent, ...(e.tracestate ? { tracestate: e.tracestate } : {}) }
        : undefined;
    return this.#o.tracing!.start(`forward ${e.to ?? ''}`, 'producer', {
      parent,
      attributes: {
        'messaging.system': MESSAGING_SYSTEM,
        'messaging.operation.type': 'send',
        'messaging.operation.name': 'forward',
        'messaging.destination.name': e.to,
        'agw.outbox': true,
        'agw.queued_ms': queuedMs(this.#o.outbox.queuedAt(q.idempotency_key)),
      },
    });
  }

  /** One batch of the drain: 'next' to go on, else when to try again (#drain's answer). */
  async #drainBatch(batch: Queued[], spans: Span[] | undefined): Promise<number | 'next'> {
    const { client, logger } = this.#o;
    let res: AdapterResponse;
    try {
      res = await this.#call(
        'POST',
        '/v1/messages/batch',
        `{"messages":[${batch.map((q) => q.body).join(',')}]}`,
      );
    } catch (err) {
      // the try is recorded as failed; the message's next try is a span of its own
      for (const span of spans ?? []) span.fail(err);
      if (!(err instanceof RetryableAnswer)) return 0;
      const s = err.response.status;
      if (s === 503 || s === 429) return err.response.retryAfterS ?? 0;
      res = err.response; // a 500: maybe an entry the adapter cannot take
    }
    if (res.status !== 200) {
      client.lastError = `drain refused: ${res.status} ${res.body.slice(0, 200)}`;
      logger.error(
        { status: res.status, body: res.body.slice(0, 500), entries: batch.length },
        'the adapter refused a drain batch whole',
      );
      if (this.#strike(batch, res)) return 'next';
      return 0;
    }
    this.#struck = { seq: -1, times: 0 };
    this.#batchSize = Math.min(MAX_BATCH, this.#batchSize * 2);
    const { results } = JSON.parse(res.body) as { results: BatchResult[] };
    const delivered: number[] = [];
    const refused: Refused[] = [];
    const stored: { idempotencyKey: string; ack: BatchResult }[] = [];
    let stopAt = -1;
    let retryAfterS: number | undefined;
    for (let i = 0; i < batch.length; i++) {
      const r = results[i];
      const q = batch[i]!;
      const span = spans?.[i];
      if (r === undefined || isRetryableAnswer(r.status, r.error)) {
        span?.event('kept', { 'agw.status': r?.status });
        stopAt = i; // keep this one and the rest, in order, for the next try
        retryAfterS = retryAfterOf(r);
        break;
      }
      if (r.status === 200 || r.status === 201) {
        delivered.push(q.seq);
        this.#assigned(r);
        stored.push({ idempotencyKey: q.idempotency_key, ack: r });
        if (span !== undefined) sent(span, r as unknown as { message_id: string; channel: string });
      } else {
        refused.push({ q, status: r.status, answer: JSON.stringify(r) });
        span?.fail({ code: r.error ?? String(r.status) });
      }
    }
    this.#setAside(delivered, refused);
    // told once they left the outbox: a listener that looks finds them gone
    for (const s of stored) this.#o.events.emit('outbox:sent', s);
    if (stopAt >= 0) return retryAfterS ?? 0;
    this.#delayStep = 0;
    return 'next';
  }

  /** The next batch: the outbox's first entries, as many as fit the batch size and bytes. */
  #nextBatch(): Queued[] {
    // the adapter reads a batch body of up to maxMessageBytes × MAX_BATCH; the wrapper and
    // commas take a few bytes of it
    const budget = this.maxMessageBytes * MAX_BATCH - 64;
    const batch: Queued[] = [];
    let bytes = 0;
    for (const q of this.#o.outbox.peek(this.#batchSize)) {
      const size = Buffer.byteLength(q.body) + 1;
      if (batch.length > 0 && bytes + size > budget) break;
      batch.push(q);
      bytes += size;
    }
    return batch;
  }

  /**
   * A whole-batch refusal: halve the batch (at once for a 413, else on the third refusal of the
   * same head), or set a lone entry aside. True when the drain should go on at once.
   */
  #strike(batch: readonly Queued[], res: AdapterResponse): boolean {
    const head = batch[0]!;
    this.#struck =
      this.#struck.seq === head.seq
        ? { seq: head.seq, times: this.#struck.times + 1 }
        : { seq: head.seq, times: 1 };
    if (res.status !== 413 && this.#struck.times < STRIKES) return false;
    this.#struck = { seq: -1, times: 0 };
    if (batch.length > 1) {
      this.#batchSize = Math.ceil(batch.length / 2);
      return true;
    }
    this.#setAside([], [{ q: head, status: res.status, answer: answerJson(res) }]);
    return true;
  }

  /** Settles a batch's outcome: delivered ones leave, refused ones go to the local dead letters. */
  #setAside(delivered: readonly number[], refused: readonly Refused[]): void {
    const { outbox, events } = this.#o;
    outbox.settle(delivered, refused);
    for (const r of refused)
      events.emit('outbox:dead-letter', { idempotencyKey: r.q.idempotency_key, status: r.status });
  }

  /** Tries the drain again after a backoff (exponential, full jitter, capped), or Retry-After. */
  #schedule(retryAfterS?: number): void {
    if (this.#stopped || this.#timer !== undefined || this.#draining !== undefined) return;
    const wait =
      retryAfterS !== undefined
        ? retryAfterS * 1000
        : Math.max(50, backoff(this.#delayStep, this.#o.backoff));
    if (retryAfterS !== undefined) this.#holdUntil = Date.now() + wait;
    this.#delayStep = Math.min(this.#delayStep + 1, 30);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.kick();
    }, wait);
  }
}

const BATCH_OPEN = Buffer.from('{"messages":[');
const BATCH_COMMA = Buffer.from(',');
const BATCH_CLOSE = Buffer.from(']}');

/** The batch request's body for these sends: their envelopes' bytes, as they are. */
function batchBody(batch: readonly Waiting[]): Buffer {
  const parts: Buffer[] = [BATCH_OPEN];
  batch.forEach((w, i) => {
    if (i > 0) parts.push(BATCH_COMMA);
    parts.push(typeof w.body === 'string' ? Buffer.from(w.body) : w.body);
  });
  parts.push(BATCH_CLOSE);
  return Buffer.concat(parts);
}

/** A batch entry's Retry-After (`retry_after_s` of a 429), whole seconds; else undefined. */
function retryAfterOf(r: BatchResult | undefined): number | undefined {
  const s = r?.retry_after_s;
  return typeof s === 'number' && Number.isFinite(s) && s > 0 ? Math.ceil(s) : undefined;
}

/** The adapter's answer as JSON for the local dead letters (a proxy's page is wrapped). */
function answerJson(res: AdapterResponse): string {
  try {
    JSON.parse(res.body);
    return res.body;
  } catch {
    return JSON.stringify({ status: res.status, body: res.body.slice(0, 4096) });
  }
}

function queuedMs(at: number | undefined): number | undefined {
  return at === undefined ? undefined : Date.now() - at;
}
