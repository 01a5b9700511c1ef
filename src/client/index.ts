/**
 * The typed client agent runtimes import (`agent-gateway/client`, or the package
 * `@agent-gateway/client` alone: docs/reference/client.md). It speaks to the agent's
 * sidecar on localhost (no token: the pod is the trust boundary), or to the adapter directly
 * with a token. No dependencies beyond Node's fetch.
 *
 * ```ts
 * import { GatewayClient } from 'agent-gateway/client';
 * const gw = new GatewayClient(); // http://127.0.0.1:7070
 * await gw.send({ to: 'product', kind: 'task/request', payload: { task_id: 'T-1', description: '...' } });
 * await gw.receive(async (m) => { ... }, { signal }); // acks after the handler, nacks if it throws
 * // in a handler, an answer to m joins m's thread:
 * //   await gw.send({ to: `@${m.sender}`, kind: 'status', reply_to: m.message_id });
 * ```
 *
 * An ask sends a message and waits for the first reply to it (through the sidecar):
 *
 * ```ts
 * const r = await gw.ask({ to: '@research', kind: 'task/request', payload: { ... } }, { timeoutMs: 120_000 });
 * if (r.status === 'replied') { ...r.reply.message...; await gw.ack([r.reply.delivery_id]); }
 * ```
 *
 * A send is retried a few times when the answer may change (429, 503, no answer) with the same
 * idempotency key, so a retry never makes a second message. The receive loop extends the lease
 * of a message while its handler runs; a handler that can never handle a message throws a
 * {@link PermanentError}, and the message is dead-lettered at once instead of coming again.
 */

import {
  type AckResult,
  type AskResult,
  type Delivery,
  type HeartbeatResult,
  type Inputs,
  type LeasesResult,
  type Me,
  type Message,
  type MessageStatus,
  type NackResult,
  type OperationName,
  type OutgoingMessage,
  type Outputs,
  renderRequest,
  type SendResult,
} from '../protocol/agent-api.js';
import { isRetryableAnswer } from '../protocol/errors.js';
import { uuidv7 } from '../protocol/ids.js';
import { ASK_DEFAULT_TIMEOUT_MS, ASK_MAX_TIMEOUT_MS } from '../protocol/limits.js';
import { LeaseKeeper } from './leases.js';
import { activeTrace, inHandlingSpan, otelApi } from './tracing.js';

export type {
  AckResult,
  AskRecipient,
  AskResult,
  Delivery,
  HeartbeatResult,
  Lease,
  Me,
  Message,
  MessageStatus,
  NackResult,
  OutgoingMessage,
  RecipientStatus,
  ReplyDelivery,
  SendResult,
} from '../protocol/agent-api.js';

/** An answer that is not a success, with the error catalogue's code. */
export class GatewayClientError extends Error {
  override name = 'GatewayClientError';
  /** May the same request succeed later unchanged (429, 503, ...)? The catalogue's rule. */
  readonly retryable: boolean;
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryAfterS?: number,
    /** The request field at fault, as a dotted path (`payload.task_id`), when there is one. */
    readonly field?: string,
  ) {
    super(message);
    this.retryable = isRetryableAnswer(status, code);
  }
}

/**
 * Thrown by a receive handler that can never handle a message (a malformed task, a kind it
 * does not know): the loop nacks it with `retry: false` and the adapter dead-letters it at once
 * (reason `rejected`, this error's message kept as the dead letter's note), so the channel's
 * next message comes. Any error with `permanent: true` counts the same.
 */
export class PermanentError extends Error {
  override name = 'PermanentError';
  readonly permanent = true as const;
}

/** A PermanentError, or any error that says `permanent: true`. */
export function isPermanentError(err: unknown): boolean {
  return (
    err instanceof PermanentError ||
    (typeof err === 'object' && err !== null && (err as { permanent?: unknown }).permanent === true)
  );
}

export interface GatewayClientOptions {
  /** The sidecar (default http://127.0.0.1:7070) or the adapter. */
  readonly url?: string;
  /** The agent's token: only when talking to the adapter directly. Default none. */
  readonly token?: string;
  /**
   * Tries of one send() in all, the first included, while the answer may change (429, 503, no
   * answer); each try carries the same idempotency key. Default 4; 1 turns retries off.
   */
  readonly sendAttempts?: number;
  /** The first backoff cap between tries of a send, ms, doubling each try (full jitter). Default 250. */
  readonly retryBaseMs?: number;
  /**
   * The longest wait between tries of a send, ms: the backoff cap, and a Retry-After longer
   * than this ends the retries (the error is thrown). Default 10000.
   */
  readonly retryMaxMs?: number;
  /** The fetch to use (a wrapper, a custom dispatcher). Default the global fetch. */
  readonly fetch?: typeof fetch;
}

export interface ReceiveOptions {
  /** Seconds each long poll may wait. Default 30. */
  readonly waitS?: number;
  /** Deliveries per poll. Default 10. */
  readonly max?: number;
  /** Stops the loop (it returns after the poll in progress). */
  readonly signal?: AbortSignal;
  /**
   * Called when the handler throws; the delivery is nacked and comes again, or, for a
   * {@link PermanentError}, is dead-lettered at once. Default none.
   */
  readonly onError?: (err: unknown, delivery: Delivery) => void;
  /**
   * While a handler runs (and while later deliveries of the same poll wait their turn), their
   * leases are extended by this much, ms, whenever half of a lease is left, until the handler
   * settles. Default: the lease the adapter gave (its `lease_expires_at` less the time of
   * receipt), at least 1000 and at most 900000 (the default AGW_MAX_LEASE_MS). `false`: never
   * extend (a handler longer than the lease sees its message come again).
   */
  readonly extendLeaseMs?: number | false;
  /**
   * Called when a lease extension failed (it never stops the loop: one worth retrying is tried
   * again, one no longer leased is given up, and at worst the message comes again). Default none.
   */
  readonly onLeaseError?: (err: unknown, deliveryIds: number[]) => void;
  /**
   * Each handler runs in a `process <channel>` span, a child of the delivered message's trace
   * context, active while it runs (so what it sends continues the trace): through
   * @opentelemetry/api when the application has it and has registered a tracer provider.
   * Default true; false: never.
   */
  readonly trace?: boolean;
}

export interface NackOptions {
  /**
   * true: a failed attempt, the message comes again after a backoff. false: the agent can never
   * handle it; it is dead-lettered at once (reason `rejected`). Default true.
   */
  readonly retry?: boolean;
  /** Why, for people (at most 1000 characters); the dead letter's note when `retry` is false. */
  readonly reason?: string;
}

export interface AskOptions {
  /**
   * How long to wait for the reply, ms: 1 to 900000 (15 minutes). Default 30000. The time is
   * up: the answer is `timeout` (no error), with where the message is for each recipient.
   */
  readonly timeoutMs?: number;
  /** Gives the wait up (the message is sent all the same); the call rejects. */
  readonly signal?: AbortSignal;
}

/**
 * The longest one request of an ask waits, ms: below the 300 s undici's fetch waits for an
 * answer's headers. A longer ask is the same ask again (the same key: nothing is sent again),
 * until its time is up.
 */
const ASK_STEP_MS = 240_000;

/** Messages the client remembers having handled, to drop at-least-once repeats. */
const SEEN_MAX = 10_000;
/** The longest nack reason the adapter takes. */
const REASON_MAX = 1000;

export class GatewayClient {
  readonly url: string;
  readonly #headers: Record<string, string>;
  readonly #seen = new Set<string>();
  /** Whether acks may ride on the next poll (false once a gateway answered it with 405). */
  #ackOnPoll = true;
  readonly #fetch: typeof fetch;
  readonly #sendAttempts: number;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;

  constructor(opts: GatewayClientOptions = {}) {
    this.url = (opts.url ?? 'http://127.0.0.1:7070').replace(/\/+$/, '');
    new URL(this.url); // a bad URL fails here, not as a "network error" retried later
    this.#headers = {
      'content-type': 'application/json',
      ...(opts.token === undefined ? {} : { authorization: `Bearer ${opts.token}` }),
    };
    this.#fetch = opts.fetch ?? ((input, init) => fetch(input, init));
    this.#sendAttempts = positiveInt('sendAttempts', opts.sendAttempts ?? 4);
    this.#retryBaseMs = positiveInt('retryBaseMs', opts.retryBaseMs ?? 250);
    this.#retryMaxMs = positiveInt('retryMaxMs', opts.retryMaxMs ?? 10_000);
  }

  /**
   * Sends one message. An answer that may change (429, 503, or none: the connection failed) is
   * tried again, up to `sendAttempts` in all, after Retry-After or an exponential backoff with
   * full jitter; every try carries the same idempotency key, so the adapter stores the message
   * once however many tries reached it. A refusal for good (400, 403, 409, ...) is thrown at once.
   */
  async send(message: OutgoingMessage): Promise<SendResult> {
    // sent from within a span (a handler's, say): the message's creation context is that span's
    const active = message.traceparent === undefined ? activeTrace(await otelApi()) : undefined;
    const envelope = {
      ...message,
      ...active,
      idempotency_key: message.idempotency_key ?? uuidv7(),
    };
    let body: SendResult | Omit<Extract<SendResult, { status: 'delivered' }>, 'status'>;
    for (let attempt = 1; ; attempt++) {
      try {
        body = await this.call('send', envelope);
        break;
      } catch (err) {
        const wait = this.#retryWait(err, attempt);
        if (wait === undefined) throw err;
        await new Promise((r) => setTimeout(r, wait));
      }
    }
    // the adapter's own answer (a client of the adapter directly) has no status: it is stored
    return 'status' in body && body.status === 'queued' ? body : { ...body, status: 'delivered' };
  }

  /**
   * Sends a message and waits for the first reply to it that reaches this agent (POST /v1/ask,
   * at the sidecar): `replied` with the reply, a delivery leased to this agent (handle it, then
   * ack its delivery_id, as any delivery), or, once `timeoutMs` passed, `timeout` with where the
   * message is for each recipient (its journey's cause and explanation). A poll of this agent's
   * meanwhile does not get the reply. Tried again as a send is (429, 503, no answer), and waited
   * for in steps of at most 240 s, each the same ask under the same idempotency key: nothing is
   * sent twice, and the reply is found also after the sidecar restarted.
   */
  async ask(message: OutgoingMessage, opts: AskOptions = {}): Promise<AskResult> {
    const active = message.traceparent === undefined ? activeTrace(await otelApi()) : undefined;
    const envelope = {
      ...message,
      ...active,
      idempotency_key: message.idempotency_key ?? uuidv7(),
    };
    return this.#waitInSteps(opts, (timeout_ms) =>
      this.call('ask', { ...envelope, timeout_ms }, opts.signal),
    );
  }

  /**
   * Waits again for the reply to a message this agent sent (`messageId`: its message_id, or the
   * idempotency_key of a send answered `queued`); nothing is sent. Answers as {@link ask}.
   */
  awaitReply(messageId: string, opts: AskOptions = {}): Promise<AskResult> {
    return this.#waitInSteps(opts, (timeout_ms) =>
      this.call('awaitReply', { message_id: messageId, timeout_ms }, opts.signal),
    );
  }

  /** An ask's wait, `opts.timeoutMs` in all, in requests of at most ASK_STEP_MS, each retried. */
  async #waitInSteps(
    opts: AskOptions,
    wait: (timeoutMs: number) => Promise<AskResult>,
  ): Promise<AskResult> {
    const timeoutMs = opts.timeoutMs ?? ASK_DEFAULT_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > ASK_MAX_TIMEOUT_MS)
      throw new RangeError(`timeoutMs: must be an integer from 1 to ${ASK_MAX_TIMEOUT_MS}`);
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 1; ; ) {
      const left = Math.max(1, deadline - Date.now());
      try {
        const answer = await wait(Math.min(left, ASK_STEP_MS));
        if (answer.status === 'replied' || left <= ASK_STEP_MS) return answer;
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        const pause = this.#retryWait(err, attempt++);
        if (pause === undefined || Date.now() + pause >= deadline) throw err;
        await new Promise((r) => setTimeout(r, pause));
      }
    }
  }

  /** How long to wait before try `attempt` + 1 of a send, or undefined: give up and throw. */
  #retryWait(err: unknown, attempt: number): number | undefined {
    if (attempt >= this.#sendAttempts) return undefined;
    const cap = Math.min(this.#retryMaxMs, this.#retryBaseMs * 2 ** Math.min(attempt - 1, 30));
    const jitter = cap * Math.random();
    if (err instanceof GatewayClientError) {
      if (!err.retryable) return undefined;
      if (err.retryAfterS === undefined) return jitter;
      const told = err.retryAfterS * 1000;
      return told > this.#retryMaxMs ? undefined : Math.max(told, jitter);
    }
    // no answer (connection refused or reset, DNS): the request may or may not have arrived,
    // and the same key makes either safe
    return jitter;
  }

  /**
   * Hands each delivery to `handler`, one at a time, in the order received: acked once the
   * handler resolves, nacked (redelivered later) when it throws, dead-lettered at once when it
   * throws a {@link PermanentError}. While a handler runs, the leases of the deliveries the loop
   * holds are extended (`extendLeaseMs`). A message handled before (an at-least-once repeat) is
   * acked without calling the handler again.
   */
  async receive(
    handler: (message: Message, delivery: Delivery) => Promise<void>,
    opts: ReceiveOptions = {},
  ): Promise<void> {
    const wait = opts.waitS ?? 30;
    const max = opts.max ?? 10;
    const extendMs =
      opts.extendLeaseMs === false || opts.extendLeaseMs === undefined
        ? opts.extendLeaseMs
        : positiveInt('extendLeaseMs', opts.extendLeaseMs);
    let failures = 0;
    const otel = opts.trace === false ? undefined : await otelApi();
    // The ack of a poll's last delivery goes with the next poll (POST /v1/inbox): one request
    // where two were, and the channel's next message in that very answer. The others are acked
    // at once, so a long batch never holds a finished delivery's lease.
    let carry: number[] = [];
    try {
      while (!opts.signal?.aborted) {
        let deliveries: Delivery[];
        try {
          ({ deliveries } = await (carry.length === 0
            ? this.call('inbox', { wait, max }, opts.signal)
            : this.call('inboxAcking', { wait, max, delivery_ids: carry }, opts.signal)));
          carry = [];
        } catch (err) {
          if (opts.signal?.aborted) return;
          if (carry.length > 0 && !(err instanceof GatewayClientError && err.retryable)) {
            // refused: on its own it can tell which; a gateway from before POST /v1/inbox (405)
            // is not asked again
            if (err instanceof GatewayClientError && err.status === 405) this.#ackOnPoll = false;
            await this.#settle(this.ack(carry));
            carry = [];
            continue;
          }
          // full jitter over a doubling cap, never sooner than Retry-After: agents that lost
          // their sidecar or adapter together do not all come back in the same second
          const told = err instanceof GatewayClientError ? (err.retryAfterS ?? 0) * 1000 : 0;
          const cap = Math.min(this.#retryMaxMs, this.#retryBaseMs * 2 ** Math.min(failures++, 30));
          await new Promise((r) => setTimeout(r, Math.max(told, cap * Math.random())));
          continue;
        }
        failures = 0;
        if (deliveries.length === 0) continue;
        const keeper =
          extendMs === false
            ? undefined
            : new LeaseKeeper(deliveries, Date.now(), {
                extend: (ids, ms) => this.extendLease(ids, ms),
                extendMs,
                onError: (err, ids) => opts.onLeaseError?.(err, ids),
              });
        try {
          for (const [i, d] of deliveries.entries()) {
            if (!(await this.#handle(d, handler, opts, keeper, otel))) continue;
            if (i === deliveries.length - 1 && this.#ackOnPoll) carry = [d.delivery_id];
            else await this.#settle(this.ack([d.delivery_id]));
          }
        } finally {
          keeper?.close();
        }
      }
    } finally {
      // stopped with an ack still to carry (or a poll carrying one aborted): sent on its own
      if (carry.length > 0) await this.#settle(this.ack(carry));
    }
  }

  /** Runs the handler; true when the delivery is to be acked, false when it was nacked. */
  async #handle(
    d: Delivery,
    handler: (message: Message, delivery: Delivery) => Promise<void>,
    opts: ReceiveOptions,
    keeper: LeaseKeeper | undefined,
    otel: Awaited<ReturnType<typeof otelApi>>,
  ): Promise<boolean> {
    if (this.#seen.has(d.message.message_id)) {
      keeper?.release(d.delivery_id);
      return true;
    }
    try {
      await inHandlingSpan(otel, d.message, d.attempt, () => handler(d.message, d));
    } catch (err) {
      keeper?.release(d.delivery_id);
      opts.onError?.(err, d);
      const ids = [d.delivery_id];
      await this.#settle(
        isPermanentError(err)
          ? this.nack(ids, { retry: false, reason: reasonOf(err) })
          : this.nack(ids),
      );
      return false;
    }
    keeper?.release(d.delivery_id);
    this.#seen.add(d.message.message_id);
    if (this.#seen.size > SEEN_MAX) this.#seen.delete(this.#seen.values().next().value!);
    return true;
  }

  /**
   * Waits for an ack or nack of the loop. If it failed (the sidecar restarting), the delivery
   * comes again after its lease, and a handled one is then acked without calling the handler.
   */
  async #settle(call: Promise<unknown>): Promise<void> {
    await call.catch(() => {});
  }

  /** POST /v1/acks: done with these deliveries. */
  ack(deliveryIds: readonly number[]): Promise<AckResult> {
    return this.call('ack', { delivery_ids: deliveryIds });
  }

  /** POST /v1/nacks: failed; they come again, or with `retry: false` are dead-lettered at once. */
  nack(deliveryIds: readonly number[], opts: NackOptions = {}): Promise<NackResult> {
    return this.call('nack', {
      delivery_ids: deliveryIds,
      ...(opts.retry === undefined ? {} : { retry: opts.retry }),
      ...(opts.reason === undefined ? {} : { reason: opts.reason.slice(0, REASON_MAX) }),
    });
  }

  /**
   * POST /v1/leases: still working on these; each lease now ends `extendMs` from now (at most
   * the adapter's AGW_MAX_LEASE_MS). A GatewayClientError 409 `not_leased` when one is no
   * longer leased to this agent (then none is extended).
   */
  extendLease(deliveryIds: readonly number[], extendMs: number): Promise<LeasesResult> {
    return this.call('extendLeases', { delivery_ids: deliveryIds, extend_ms: extendMs });
  }

  /** GET /v1/messages/{id}: for its sender (and alerts_to), what became of a message. */
  messageStatus(messageId: string): Promise<MessageStatus> {
    return this.call('messageStatus', { message_id: messageId });
  }

  /** GET /v1/me: who this agent is, its channels and its limits. */
  me(): Promise<Me> {
    return this.call('me', {});
  }

  heartbeat(): Promise<HeartbeatResult> {
    return this.call('heartbeat', {});
  }

  /** A priority=CRIT journald entry through the sidecar; works with the adapter down. */
  async emergency(
    reason: string,
    message: string,
    fields?: Record<string, string | number | boolean>,
  ): Promise<void> {
    await this.call('emergency', { reason, message, ...(fields === undefined ? {} : { fields }) });
  }

  /**
   * Any of the agent's operations (docs/reference/operations.md) by name, as declared: its
   * answer, or a GatewayClientError for a refusal. The methods above are these with their
   * defaults and retries.
   */
  async call<N extends OperationName>(
    name: N,
    input: Inputs[N],
    signal?: AbortSignal,
  ): Promise<Outputs[N]> {
    const { method, path, body } = renderRequest(name, input);
    return (await this.#call(method, path, body, signal)) as Outputs[N];
  }

  /** One request; `body` is sent as JSON (a string: already JSON). */
  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    signal?: AbortSignal,
  ): Promise<unknown> {
    const res = await this.#fetch(this.url + path, {
      method,
      headers: this.#headers,
      ...(body === undefined
        ? {}
        : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
      ...(signal === undefined ? {} : { signal }),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { error: 'invalid_response', message: text.slice(0, 200) };
    }
    if (!res.ok) {
      const e = parsed as { error?: string; message?: string; field?: unknown };
      const ra = Number(res.headers.get('retry-after'));
      throw new GatewayClientError(
        res.status,
        e.error ?? 'unknown',
        e.message ?? res.statusText,
        Number.isFinite(ra) && ra > 0 ? ra : undefined,
        typeof e.field === 'string' ? e.field : undefined,
      );
    }
    return parsed;
  }
}

/** The nack reason for an error a handler threw: its message, within the adapter's bound. */
function reasonOf(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.slice(0, REASON_MAX);
}

function positiveInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name}: must be a positive integer`);
  return v;
}
