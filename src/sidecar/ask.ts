/**
 * Asking (CONTRACT.md, "Asking and waiting for the answer"; docs/design/time.md, "Asking"): after
 * the send, the wait for the first reply to the message that reaches this agent. The service
 * (service.ts) sends; this waits, in two ways at once, and takes whichever comes first:
 *
 * - at the adapter, GET /v1/messages/{id}/reply?wait=S: a long poll that takes the reply's copy
 *   for the agent (leased ahead of its channel's order, its lease renewed if the agent holds it
 *   already, or as it is once settled), woken by the commit that stores the reply. Repeated, at
 *   most MAX_REPLY_WAIT_S at a time, until the ask's time is up;
 * - in the agent's own inbox polls: a reply a poll brings while an ask waits for it is handed to
 *   the ask (InboxRepair.claim), not to the poll.
 *
 * Either way the reply counts as handed over (InboxRepair.taken), on disk before the ask
 * answers, so a later gap scan does not hand it to the agent again and the agent's ack of it
 * works as any. Nothing here is kept across a restart, and nothing needs to be: an ask again
 * with the same key is a duplicate send (the adapter answers its message_id), and the adapter
 * finds the reply's copy again in whatever state it is in.
 *
 * A message still in the outbox is waited for until the drain sends it ('outbox:sent'), or the
 * adapter refuses it for good ('outbox:dead-letter': its refusal is the ask's).
 */
import {
  type AskRecipient,
  type AskResult,
  type Delivery,
  type Journey,
  JsonText,
  type Message,
  pathSegment,
  type ReplyDelivery,
  type Result,
  type SendResult,
} from '../protocol/agent-api.js';
import { errorFromAnswer, GatewayError } from '../protocol/errors.js';
import { MAX_REPLY_WAIT_S } from '../protocol/limits.js';
import { type AdapterResponse, CallAborted } from './adapter-client.js';
import { backoff } from './backoff.js';
import type { Upstream } from './circuit-breaker.js';
import type { SidecarEventMap } from './events.js';
import type { InboxRepair } from './inbox-repair.js';
import type { Outbox } from './outbox.js';

/** Beyond a wait, how long one call to the adapter may take, ms (as the service's calls). */
const CALL_DEADLINE_MS = 10_000;
/**
 * Between tries while the adapter does not answer: 250 ms doubling to 5 s, full jitter. The
 * breaker fails a call at once while open, so the ask waits here, not at the adapter.
 */
const RETRY = { baseMs: 250, maxMs: 5000 };

export interface AsksOptions {
  /** The adapter connection through the breaker, as every call of the agent's. */
  readonly upstream: Upstream;
  readonly repair: InboxRepair;
  readonly outbox: Outbox;
  /** Where the drain tells 'outbox:sent' and 'outbox:dead-letter'. */
  readonly events: SidecarEventMap;
}

/**
 * What an ask needs of the service: a message's journey, as GET /v1/messages/{id}/journey
 * answers it (by message_id or key; one in the outbox, or refused from it, answered there).
 */
export type JourneyOf = (id: string) => Promise<Result<'journey'>>;

/** A queued message the adapter refused for good: what its wait answers instead. */
export type Refusal = (key: string, status: number, answer: unknown) => GatewayError;

/** An ask's refusal: the adapter's, as a send's would have been passed back. */
const refusedAsSent: Refusal = (_key, status, answer) => errorFromAnswer(status, answer);

/** A send's answer once the adapter stored the message. */
type Stored = Extract<SendResult, { status: 'delivered' }>;

/** A reply being waited for: who is given it when an inbox poll brings it. */
type Hand = (d: Delivery) => void;

export class Asks {
  readonly #o: AsksOptions;
  /** The asks waiting now, by the message_id their reply answers. */
  readonly #waiting = new Map<string, Set<Hand>>();

  constructor(opts: AsksOptions) {
    this.#o = opts;
  }

  /**
   * InboxRepair's claim: a reply an ask waits for, brought by an inbox poll, is given to every
   * ask waiting for it (two asks of the same key wait for the same reply) and left out of the
   * poll. False when no ask waits for it.
   */
  claim(d: Delivery): boolean {
    const to = d.message.reply_to;
    const hands = to === undefined ? undefined : this.#waiting.get(to);
    if (hands === undefined) return false;
    for (const hand of [...hands]) hand(d);
    return true;
  }

  /**
   * After the send: its answer, then the reply or, once `deadline` (ms) passed, where the
   * message is. A queued send is waited for until it is sent first.
   */
  async answer(
    sent: SendResult,
    deadline: number,
    journey: JourneyOf,
    signal?: AbortSignal,
    refused: Refusal = refusedAsSent,
  ): Promise<AskResult> {
    let message: Stored;
    if (sent.status === 'queued') {
      const key = sent.idempotency_key;
      const stored = await this.#whenSent(key, deadline, journey, refused, signal);
      if (stored === undefined) {
        return { status: 'timeout', message: sent, recipients: await recipients(key, journey) };
      }
      message = stored;
    } else message = sent;
    const reply = await this.#reply(message.message_id, deadline, signal);
    if (reply !== undefined) return { status: 'replied', message, reply };
    return {
      status: 'timeout',
      message,
      recipients: await recipients(message.message_id, journey),
    };
  }

  /**
   * The wait again, for a message sent: `id` its message_id, or the idempotency_key of one of
   * the agent's own sends. One still in the outbox is waited for until it is sent; one the
   * adapter refused from it for good was never sent (404).
   */
  async again(
    id: string,
    deadline: number,
    journey: JourneyOf,
    signal?: AbortSignal,
  ): Promise<AskResult> {
    const { outbox } = this.#o;
    if (outbox.queuedAt(id) !== undefined) {
      const queued: SendResult = {
        status: 'queued',
        idempotency_key: id,
        outbox_depth: outbox.depth,
      };
      return this.answer(queued, deadline, journey, signal, neverSent);
    }
    const refused = outbox.deadLetter(id);
    if (refused !== undefined) throw neverSent(id, refused.status, refused.answer);
    // the journey finds it by message_id or by key (a recipient's own copy, for a message the
    // agent did not send: the adapter's wait then says not_found)
    const message = storedOf(resultValue(await journey(id)));
    if (message === undefined)
      throw new GatewayError('not_found', `no message ${id.slice(0, 64)} to wait for a reply to`);
    return this.answer(message, deadline, journey, signal, neverSent);
  }

  /**
   * Until the drain sends the message under `key` (its stored answer), or the time is up
   * (undefined); its refusal for good thrown.
   */
  #whenSent(
    key: string,
    deadline: number,
    journey: JourneyOf,
    refused: Refusal,
    signal?: AbortSignal,
  ): Promise<Stored | undefined> {
    const { events, outbox } = this.#o;
    return new Promise<Stored | undefined>((resolve, reject) => {
      const end = () => {
        clearTimeout(timer);
        events.off('outbox:sent', onSent);
        events.off('outbox:dead-letter', onRefused);
        signal?.removeEventListener('abort', onAbort);
      };
      const done = (v: Stored | undefined) => {
        end();
        resolve(v);
      };
      const fail = (err: unknown) => {
        end();
        reject(err);
      };
      const onSent = (s: { idempotencyKey: string; ack: Readonly<Record<string, unknown>> }) => {
        if (s.idempotencyKey === key) done({ ...s.ack, status: 'delivered' } as unknown as Stored);
      };
      const onRefused = (r: { idempotencyKey: string }) => {
        if (r.idempotencyKey !== key) return;
        const d = outbox.deadLetter(key);
        fail(refused(key, d?.status ?? 500, d?.answer ?? null));
      };
      const onAbort = () => fail(closed());
      const timer = setTimeout(() => done(undefined), Math.max(0, deadline - Date.now()));
      events.on('outbox:sent', onSent);
      events.on('outbox:dead-letter', onRefused);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted === true) onAbort();
      // it left the outbox before this listened: refused, or sent (the adapter's journey, by
      // its key, has the message as stored)
      else if (outbox.queuedAt(key) === undefined) {
        if (outbox.deadLetter(key) !== undefined) onRefused({ idempotencyKey: key });
        else
          journey(key).then((j) => {
            const stored = storedOf(resultValue(j));
            if (stored === undefined) fail(new GatewayError('not_found', `no message ${key}`));
            else done(stored);
          }, fail);
      }
    });
  }

  /**
   * The reply to `messageId`, from the adapter's wait or an inbox poll, whichever first;
   * undefined once `deadline` passed with none.
   */
  async #reply(
    messageId: string,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<ReplyDelivery | undefined> {
    let hand!: Hand;
    const handed = new Promise<Delivery>((resolve) => {
      hand = resolve;
    });
    const hands = this.#waiting.get(messageId) ?? new Set<Hand>();
    this.#waiting.set(messageId, hands);
    hands.add(hand);
    try {
      for (let failures = 0; ; ) {
        const left = deadline - Date.now();
        if (left <= 0) return undefined;
        // whole seconds: the last wait may run up to a second past the deadline, never short
        const waitS = Math.min(MAX_REPLY_WAIT_S, Math.ceil(left / 1000));
        const cut = new AbortController();
        const path = `/v1/messages/${pathSegment(messageId)}/reply?wait=${waitS}`;
        const call = this.#o.upstream
          .request(
            'GET',
            path,
            undefined,
            waitS * 1000 + CALL_DEADLINE_MS,
            signal === undefined ? cut.signal : AbortSignal.any([cut.signal, signal]),
          )
          .then(
            (res) => ({ res }),
            (err: unknown) => ({ err }),
          );
        const first = await Promise.race([call, handed.then((d) => ({ d }))]);
        if ('d' in first) {
          // an inbox poll brought it (InboxRepair took it as handed over): the wait upstream
          // is given up, and ends at the adapter without taking anything
          cut.abort();
          this.#o.repair.persist();
          return { ...first.d, state: 'leased' };
        }
        if ('err' in first) {
          if (first.err instanceof CallAborted && signal?.aborted === true) throw closed();
        } else {
          const reply = this.#answered(first.res);
          if (reply === null) {
            failures = 0;
            continue; // none within the wait: wait again
          }
          if (reply !== undefined) return reply;
        }
        // the adapter did not answer, or answered that it cannot now: wait, then ask again
        const pause = Math.min(backoff(failures++, RETRY), Math.max(0, deadline - Date.now()));
        const woke = await Promise.race([
          sleep(pause, signal).then(() => undefined),
          handed.then((d) => d),
        ]);
        if (woke !== undefined) {
          this.#o.repair.persist();
          return { ...woke, state: 'leased' };
        }
        if (signal?.aborted === true) throw closed();
      }
    } finally {
      hands.delete(hand);
      if (hands.size === 0 && this.#waiting.get(messageId) === hands)
        this.#waiting.delete(messageId);
    }
  }

  /**
   * The adapter's answer to a wait: the reply (counted as handed over first, when the agent
   * holds it or has acked it), null for none yet, undefined for an answer to try again later;
   * a refusal for good thrown (404 `not_found`: a message the agent did not send).
   */
  #answered(res: AdapterResponse): ReplyDelivery | null | undefined {
    if (res.status === 200) {
      const { delivery } = JSON.parse(res.body) as { delivery: ReplyDelivery | null };
      if (delivery === null) return null;
      if (delivery.message !== null && delivery.state !== 'dead_letter') {
        this.#o.repair.taken({ delivery_id: delivery.delivery_id, message: delivery.message });
        this.#o.repair.persist();
      }
      return delivery;
    }
    if (res.retryable) return undefined;
    throw errorFromAnswer(res.status, res.body, res.retryAfterS);
  }
}

/** Each recipient's copy from the message's journey; none when it cannot be read now. */
async function recipients(id: string, journey: JourneyOf): Promise<AskRecipient[]> {
  try {
    return resultValue(await journey(id)).recipients.map((r) => ({
      agent: r.agent,
      state: r.state,
      cause: r.cause,
      explanation: r.explanation,
    }));
  } catch {
    return []; // the adapter is away: the time is up all the same, and no error
  }
}

/** The message of a journey as its send's answer; undefined for one still at the sender. */
function storedOf(j: Journey): Stored | undefined {
  return 'message' in j && j.message !== null ? storedAnswer(j.message) : undefined;
}

/** An operation's result as its value (the adapter's JSON parsed). */
function resultValue<T>(r: T | JsonText<T>): T {
  return r instanceof JsonText ? r.value() : r;
}

/** A stored message as the answer its send would have had (stored before: a duplicate). */
function storedAnswer(m: Message): Stored {
  return {
    status: 'delivered',
    message_id: m.message_id,
    channel: m.channel,
    channel_sequence_id: m.channel_sequence_id,
    timestamp_iso8601: m.timestamp_iso8601,
    idempotency_key: m.idempotency_key,
    priority: m.priority,
    thread_id: m.thread_id,
    hop: m.hop,
    duplicate: true,
    ...(m.traceparent === undefined ? {} : { traceparent: m.traceparent }),
    ...(m.tracestate === undefined ? {} : { tracestate: m.tracestate }),
  };
}

/** The wait again for a queued message the adapter refused for good: it was never sent. */
const neverSent: Refusal = (key, status, answer) => {
  const said = errorFromAnswer(status, answer);
  return new GatewayError(
    'not_found',
    `${key.slice(0, 64)} was never sent: the adapter refused it for good (${status} ${said.code}: ${said.message}); it is in the sidecar's dead letters (GET /v1/outbox/dead-letters)`,
  );
};

function closed(): GatewayError {
  return new GatewayError('client_closed', 'the agent closed its request before the answer');
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
