/**
 * The sidecar's operations, below its HTTP: the agent API (protocol/agent-api.ts declares each
 * one), implemented here once. The routes (routes.ts) and the MCP tools (mcp-tools.ts) are
 * rendered from the declarations onto these methods. Each returns its operation's result, or the
 * adapter's JSON of it as it came (JsonText: the bytes are passed on, never parsed and written
 * again), and throws a refusal as a GatewayError, the adapter's kept as it answered them.
 *
 * Sends go through the forwarder (breaker, outbox, drain). The inbox, acks, nacks, heartbeat and
 * replay go to the adapter with the agent's token, the inbox through inbox repair. An ask sends,
 * then waits for the reply (ask.ts). Emergencies go to journald and work with the adapter down.
 */
import type { Emergencies } from '../journald/emergency.js';
import {
  type AgentApi,
  type CallOptions,
  type Inputs,
  JsonText,
  OPERATIONS,
  type OperationName,
  type Outputs,
  pathSegment,
  type Result,
} from '../protocol/agent-api.js';
import { parseEnvelope } from '../protocol/envelope.js';
import { errorFromAnswer, GatewayError } from '../protocol/errors.js';
import { uuidv7 } from '../protocol/ids.js';
import { ASK_DEFAULT_TIMEOUT_MS, MAX_WAIT_S } from '../protocol/limits.js';
import type { Answer } from '../protocol/router.js';
import type { TraceContext } from '../protocol/trace-context.js';
import {
  handedOver,
  received,
  sent,
  startReceive,
  startSend,
  startSettle,
} from '../telemetry/messaging.js';
import { NO_TRACING, type Span, type Tracing } from '../telemetry/tracing.js';
import { type AdapterClient, type AdapterResponse, CallAborted } from './adapter-client.js';
import type { Asks } from './ask.js';
import type { AdapterBreaker, Upstream } from './circuit-breaker.js';
import type { Forwarder } from './forwarder.js';
import type { StartGate } from './gate.js';
import { HandedOverMemory } from './handed-over.js';
import { type InboxRepair, splitLocal } from './inbox-repair.js';
import type { Outbox } from './outbox.js';

/** Beyond the longest wait, how long an adapter call may take, ms. */
const CALL_DEADLINE_MS = 10_000;

export interface SidecarServiceOptions {
  readonly agentId: string;
  readonly client: AdapterClient;
  /** The adapter connection through the breaker: every call of the agent's goes this way. */
  readonly upstream: Upstream;
  readonly forwarder: Forwarder;
  readonly repair: InboxRepair;
  readonly outbox: Outbox;
  readonly breaker: AdapterBreaker;
  readonly gate: StartGate;
  readonly emergencies: Emergencies;
  /** The asks' waits for their replies (ask.ts). */
  readonly asks: Asks;
  /** Spans (telemetry/tracing.ts): NO_TRACING unless OTEL_* asks for traces. */
  readonly tracing?: Tracing;
}

export class SidecarService implements AgentApi {
  readonly #o: SidecarServiceOptions;
  readonly #tracing: Tracing;
  /** What the agent was handed, for its settle spans' links (tracing on only). */
  readonly #handed = new HandedOverMemory();

  constructor(opts: SidecarServiceOptions) {
    this.#o = opts;
    this.#tracing = opts.tracing ?? NO_TRACING;
  }

  /**
   * An envelope from the agent: given an idempotency key if it has none, checked (a bad one is
   * never queued), then forwarded or queued. `raw`: the bytes it came in (POST /v1/messages),
   * which go on to the adapter as they are once the envelope is checked, rather than being
   * serialized again (the MCP tools pass none).
   */
  async send(value: Inputs['send'], opts: CallOptions = {}): Promise<Result<'send'>> {
    let v: unknown = value;
    const raw = opts.raw;
    let bytes = raw;
    if (typeof v === 'object' && v !== null && !Array.isArray(v) && !('idempotency_key' in v)) {
      // time-ordered, so the adapter's key index stays local (bench/RESULTS.md, random keys)
      const key = uuidv7();
      v = { ...v, idempotency_key: key };
      bytes = raw === undefined ? undefined : withKey(raw, key);
    }
    const envelope = parseEnvelope(v);
    const { agentId } = this.#o;
    if (envelope.sender !== undefined && envelope.sender !== agentId) {
      throw new GatewayError(
        'sender_mismatch',
        `this sidecar speaks for ${agentId}, not "${envelope.sender}"`,
        { field: 'sender' },
      );
    }
    // the message's creation context: the body's, else the agent's request's (header, _meta)
    const given: TraceContext | undefined =
      envelope.traceparent !== undefined
        ? { traceparent: envelope.traceparent, tracestate: envelope.tracestate }
        : opts.trace;
    let span: Span | undefined;
    if (this.#tracing.on) {
      // the sidecar's `send` span, a child of it, becomes the message's stored context
      span = startSend(this.#tracing, envelope.to, given, agentId);
      const own = span.context;
      if (own !== undefined) {
        const { tracestate: _, ...rest } = v as Record<string, unknown>;
        v = { ...rest, ...own };
        bytes = undefined;
      }
    } else if (envelope.traceparent === undefined && opts.trace !== undefined) {
      v = { ...(v as object), ...opts.trace };
      bytes = bytes === undefined ? undefined : withMembers(bytes, opts.trace);
    }
    try {
      // the adapter hears an envelope without `sender`, as it always has: one that names it is
      // serialized again without it (rare: the field is optional and must be the agent anyway)
      const answer = await this.#o.forwarder.send(
        v as Record<string, unknown> & { idempotency_key: string },
        envelope.sender === undefined ? bytes : undefined,
      );
      if (span !== undefined) sendOutcome(span, answer);
      const stored = span?.context ?? given;
      return result<'send'>(stored === undefined ? answer : withTrace(answer, stored));
    } catch (err) {
      span?.fail(err);
      throw err;
    } finally {
      span?.end();
    }
  }

  /**
   * POST /v1/ask (CONTRACT.md, "Asking and waiting for the answer"): the envelope sent as send()
   * sends it, `timeout_ms` aside (not part of the message, so not of its key's identity), then
   * the wait for its reply (ask.ts): `replied`, or, once the time is up, `timeout` with where the
   * message is. The same key again sends nothing new (the adapter answers a duplicate) and
   * waits for the same reply.
   */
  async ask(input: Inputs['ask'], opts: CallOptions = {}): Promise<Result<'ask'>> {
    const { timeout_ms, ...envelope } = input;
    const deadline = Date.now() + (timeout_ms ?? ASK_DEFAULT_TIMEOUT_MS);
    const sent = await this.send(envelope, { trace: opts.trace, signal: opts.signal });
    const value = sent instanceof JsonText ? sent.value() : sent;
    return this.#o.asks.answer(
      value,
      deadline,
      (id) => this.journey({ message_id: id }),
      opts.signal,
    );
  }

  /** The wait of an ask again, for a message already sent (by message_id, or by its key). */
  async awaitReply(
    input: Inputs['awaitReply'],
    opts: CallOptions = {},
  ): Promise<Result<'awaitReply'>> {
    const deadline = Date.now() + (input.timeout_ms ?? ASK_DEFAULT_TIMEOUT_MS);
    const journey = (id: string) => this.journey({ message_id: id });
    return this.#o.asks.again(input.message_id, deadline, journey, opts.signal);
  }

  /**
   * Up to `max` deliveries, waiting up to `wait` s; gaps filled and acked ones left out. With
   * `ack` (POST /v1/inbox), these are acked first, as POST /v1/acks would, and the answer has
   * its fields too. `signal`: aborts when the agent gives the poll up (its request closed), and
   * the poll upstream with it, so the adapter leases nothing for an answer nobody would read
   * (a lease burns an attempt: four such, and the message is dead-lettered unseen).
   */
  async inbox(input: Inputs['inbox'], opts: CallOptions = {}): Promise<Result<'inbox'>> {
    const { wait, max } = pollOf(input);
    const span = this.#receiving(opts);
    const answer = await this.#o.repair.inbox(wait, max, (w, m) =>
      this.#call('GET', `/v1/inbox?wait=${w}&max=${m}`, undefined, w, opts.signal, span?.context),
    );
    if (span !== undefined) this.#received(span, answer);
    return result<'inbox'>(answer);
  }

  /** POST /v1/inbox: the acks carried on the poll (#inboxAcking). */
  async inboxAcking(
    input: Inputs['inboxAcking'],
    opts: CallOptions = {},
  ): Promise<Result<'inboxAcking'>> {
    const { wait, max } = pollOf(input);
    const span = this.#receiving(opts);
    const ids = input.delivery_ids;
    // the acks it carries: a settle span of their own, as long as the poll that carries them
    const settle =
      span === undefined || ids.length === 0
        ? undefined
        : startSettle(
            this.#tracing,
            'ack',
            this.#o.agentId,
            opts.trace,
            ids,
            this.#handed.take(ids),
          );
    settle?.set({ 'agw.carried_on_poll': true });
    let answer: Answer;
    try {
      answer = await this.#inboxAcking(wait, max, ids, opts.signal, span);
    } catch (err) {
      settle?.fail(err);
      throw err;
    } finally {
      settle?.end();
    }
    if (span !== undefined) this.#received(span, answer);
    return result<'inboxAcking'>(answer);
  }

  /** A poll's `receive` span (tracing on): recorded only if the poll hands something over. */
  #receiving(opts: CallOptions): Span | undefined {
    return this.#tracing.on ? startReceive(this.#tracing, this.#o.agentId, opts.trace) : undefined;
  }

  /** Ends a poll's span with what it handed over, remembered for the settle spans' links. */
  #received(span: Span, answer: Answer): void {
    if ((answer.status ?? 200) !== 200) return;
    const { deliveries } = bodyOf(answer) as { deliveries?: unknown[] };
    const items = (deliveries ?? []).map((d) =>
      handedOver(typeof d === 'string' ? d : JSON.stringify(d)),
    );
    this.#handed.remember(items);
    received(span, items);
  }

  /**
   * Acks: the adapter's ids go to it, the sidecar's own (negative) are settled here. The acks
   * are remembered on disk before anything goes on, so a 2xx is never followed by the same
   * message handed over again, even after a SIGKILL (docs/design/durability.md, "The sidecar's
   * file").
   */
  async ack(input: Inputs['ack'], opts: CallOptions = {}): Promise<Result<'ack'>> {
    const { upstream, local, unknown } = this.#o.repair.acked(input.delivery_ids);
    this.#o.repair.persist();
    return this.#settling('ack', input.delivery_ids, opts, (trace) =>
      this.#settle('/v1/acks', upstream, { acked: local, unknown }, {}, trace),
    );
  }

  /** Nacks: the sidecar's own copies are due again (or, retry false, dropped) here. */
  async nack(input: Inputs['nack'], opts: CallOptions = {}): Promise<Result<'nack'>> {
    const retry = input.retry ?? true;
    const { upstream, local, unknown, ignored } = this.#o.repair.nacked(input.delivery_ids, retry);
    const extra = { retry, ...(input.reason === undefined ? {} : { reason: input.reason }) };
    return this.#settling('nack', input.delivery_ids, opts, (trace) =>
      this.#settle('/v1/nacks', upstream, { nacked: local, ignored, unknown }, extra, trace),
    );
  }

  /** An ack or a nack, in its `settle` span when tracing is on. */
  async #settling<N extends 'ack' | 'nack'>(
    operation: N,
    ids: readonly number[],
    opts: CallOptions,
    run: (trace: TraceContext | undefined) => Promise<Answer>,
  ): Promise<Result<N>> {
    if (!this.#tracing.on) return result<N>(await run(undefined));
    const known = this.#handed.take(ids);
    const span = startSettle(this.#tracing, operation, this.#o.agentId, opts.trace, ids, known);
    try {
      return result<N>(await run(span.context));
    } catch (err) {
      span.fail(err);
      throw err;
    } finally {
      span.end();
    }
  }

  /** The agent is still working on these: the adapter's leases and the sidecar's own copies'. */
  async extendLeases(input: Inputs['extendLeases']): Promise<Result<'extendLeases'>> {
    const { upstream, local } = splitLocal(input.delivery_ids);
    const leases = this.#o.repair.extended(local, input.extend_ms);
    if (leases === undefined) {
      const gone = local.find((id) => !this.#o.repair.isLeasedCopy(id));
      throw new GatewayError('not_leased', `delivery ${gone} is not leased to the agent any more`, {
        field: 'delivery_ids',
      });
    }
    if (upstream.length === 0) return { leases };
    const json = JSON.stringify({ delivery_ids: upstream, extend_ms: input.extend_ms });
    const answer = result<'extendLeases'>(await this.#call('POST', '/v1/leases', json));
    if (leases.length === 0) return answer;
    const merged = answer instanceof JsonText ? answer.value() : answer;
    return { leases: [...merged.leases, ...leases] };
  }

  /** What became of a message the agent sent. */
  async messageStatus(input: Inputs['messageStatus']): Promise<Result<'messageStatus'>> {
    const path = `/v1/messages/${pathSegment(input.message_id)}`;
    return result<'messageStatus'>(await this.#call('GET', path));
  }

  /**
   * A message's journey (docs/design/journey.md, "The sidecar's part"): a message still in the
   * outbox, or refused from it for good, is answered here (it has no recipients yet); any other
   * is the adapter's answer, by message_id or by the agent's own idempotency key.
   */
  async journey(input: Inputs['journey']): Promise<Result<'journey'>> {
    const key = input.message_id;
    const { outbox, breaker, client, forwarder } = this.#o;
    const queuedAt = outbox.queuedAt(key);
    const refused = queuedAt === undefined ? outbox.deadLetter(key) : undefined;
    if (queuedAt === undefined && refused === undefined) {
      const path = `/v1/messages/${pathSegment(key)}/journey`;
      return result<'journey'>(await this.#call('GET', path));
    }
    const state = breaker.snapshot.state;
    if (queuedAt !== undefined) {
      const since = new Date(queuedAt).toISOString();
      const tries = forwarder.failedDrains;
      return {
        idempotency_key: key,
        cause: 'queued_at_sender',
        explanation: `Still in ${this.#o.agentId}'s sidecar since ${since.slice(11, 19)}: the adapter has not taken it yet (${tries} failed ${tries === 1 ? 'try' : 'tries'} in a row; circuit ${state}${client.lastError === null ? '' : `; last error: ${client.lastError}`}). It is kept and sent in order when the adapter answers.`,
        outbox: { since, tries, last_error: client.lastError, breaker: state },
        recipients: [],
      };
    }
    const d = refused!;
    const answer = d.answer as { error?: unknown; message?: unknown } | null;
    const why = typeof answer?.message === 'string' ? `: ${answer.message}` : '';
    return {
      idempotency_key: key,
      cause: 'refused_at_sender',
      explanation: `Queued at ${this.#o.agentId}'s sidecar, then refused for good by the adapter (${d.status}${why}); it is in the sidecar's dead letters (GET /v1/outbox/dead-letters) and was never delivered.`,
      outbox: {
        since: d.dead_lettered_at,
        tries: 0,
        last_error: client.lastError,
        breaker: state,
        status: d.status,
        answer: d.answer,
      },
      recipients: [],
    };
  }

  /** Who the agent is: its channels and their members, alerts_to, the adapter's limits. */
  async me(): Promise<Result<'me'>> {
    return result<'me'>(await this.#call('GET', '/v1/me'));
  }

  async heartbeat(): Promise<Result<'heartbeat'>> {
    return result<'heartbeat'>(await this.#call('POST', '/v1/heartbeat', '{}'));
  }

  async readChannel(input: Inputs['readChannel']): Promise<Result<'readChannel'>> {
    const { after, limit } = pageOf('readChannel', input);
    const name = pathSegment(input.channel);
    const path = `/v1/channels/${name}/messages?after=${after}&limit=${limit}`;
    return result<'readChannel'>(await this.#call('GET', path));
  }

  /**
   * One CRIT journald entry; past the emergency budget it is counted, not written. The input is
   * checked by its caller (the route's body check, the tool's arguments).
   */
  emergency(input: Inputs['emergency']): Outputs['emergency'] {
    const r = this.#o.emergencies.tryRaise(input, { explicit: true });
    if (!r.written) {
      throw new GatewayError(
        'rate_limited',
        "past the sidecar's emergency budget: counted, not written; retry after the Retry-After",
        { retryAfterS: r.retryAfterS },
      );
    }
    return {
      status: 'written',
      ...(r.clipped ? { clipped: true } : {}),
      // an automatic reason is the gateway's: written as manual, the one asked for kept
      ...(r.requestedReason !== undefined
        ? { reason: 'manual' as const, requested_reason: r.requestedReason }
        : {}),
    };
  }

  /** Queued messages the adapter refused for good, each with its answer: nothing is lost unseen. */
  outboxDeadLetters(input: Inputs['outboxDeadLetters'] = {}): Outputs['outboxDeadLetters'] {
    const { after, limit } = pageOf('outboxDeadLetters', input);
    return { dead_letters: this.#o.outbox.deadLetterPage(after, limit) };
  }

  status(): Outputs['status'] {
    const { client, outbox, breaker, gate } = this.#o;
    return {
      agent_id: this.#o.agentId,
      adapter_url: client.url,
      ready: gate.isOpen,
      breaker: breaker.snapshot,
      outbox: { depth: outbox.depth, capacity: outbox.capacity, dead_letters: outbox.deadLetters },
      last_adapter_contact:
        client.lastContact === null ? null : new Date(client.lastContact).toISOString(),
      last_error: client.lastError,
    };
  }

  /**
   * Acks carried on a poll. The adapter's ids ride on the sidecar's own poll upstream (one
   * request, one commit there); when the sidecar answers from what it holds without polling, or
   * that poll fails, they go on their own as POST /v1/acks. The sidecar's own ids are settled
   * here, as by ack().
   */
  async #inboxAcking(
    wait: number,
    max: number,
    ids: readonly number[],
    signal?: AbortSignal,
    span?: Span,
  ): Promise<Answer> {
    const { upstream, local, unknown } = this.#o.repair.acked(ids);
    let carried = upstream.length === 0;
    const trace = span?.context;
    // repair.inbox() commits the acks with what it hands over, before it answers
    const answer = await this.#o.repair.inbox(wait, max, async (w, m) => {
      const path = `/v1/inbox?wait=${w}&max=${m}`;
      if (carried) return this.#call('GET', path, undefined, w, signal, trace);
      const acks = JSON.stringify({ delivery_ids: upstream });
      const polled = await this.#call('POST', path, acks, w, signal, trace);
      carried = polled.status === 200;
      return polled;
    });
    if ((answer.status ?? 200) !== 200) return answer;
    const mine = { acked: local, unknown };
    if (carried && local.length === 0 && unknown.length === 0 && upstream.length > 0) return answer;
    let acks: Record<string, unknown> = { acked: [], dead_lettered: [], unknown: [] };
    if (!carried) {
      const settled: Answer = await this.#settle('/v1/acks', upstream, mine, {}, trace);
      if ((settled.status ?? 200) !== 200) return settled;
      const { deliveries } = bodyOf(answer);
      return { status: 200, body: { ...bodyOf(settled), deliveries } };
    }
    if (upstream.length > 0) acks = bodyOf(answer);
    const { deliveries } = bodyOf(answer);
    return { status: 200, body: { ...merge(acks, mine), deliveries } };
  }

  /**
   * Acks or nacks: upstream ids to the adapter, what the sidecar settled itself (its own
   * copies, unknown negative ids) merged into the adapter's answer.
   */
  async #settle(
    path: '/v1/acks' | '/v1/nacks',
    upstream: number[],
    mine: Record<string, number[]>,
    extra: object = {},
    trace?: TraceContext,
  ): Promise<Answer> {
    const empty =
      path === '/v1/acks'
        ? { acked: [], dead_lettered: [], unknown: [] }
        : { nacked: [], ignored: [], unknown: [] };
    if (upstream.length === 0) return { body: merge(empty, mine) }; // nothing for the adapter
    const body = JSON.stringify({ delivery_ids: upstream, ...extra });
    const answer = await this.#call('POST', path, body, 0, undefined, trace);
    if (answer.status !== 200 || Object.values(mine).every((ids) => ids.length === 0))
      return answer;
    return { ...answer, body: merge({ ...empty, ...bodyOf(answer) }, mine) };
  }

  /**
   * One call to the adapter through the breaker, its answer passed back as it is (a retryable
   * one too, counted against the circuit); no answer, or an open circuit, is a 503; a call
   * given up by `signal` is `client_closed` (answered to nobody).
   */
  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    waitS = 0,
    signal?: AbortSignal,
    trace?: TraceContext,
  ): Promise<Answer> {
    const deadline = Math.min(Math.max(waitS, 0), MAX_WAIT_S) * 1000 + CALL_DEADLINE_MS;
    let res: AdapterResponse;
    try {
      res = await this.#o.upstream.request(method, path, body, deadline, signal, trace);
    } catch (err) {
      if (err instanceof CallAborted) {
        throw new GatewayError('client_closed', 'the agent closed its request before the answer');
      }
      throw new GatewayError('adapter_unreachable', 'the adapter cannot be reached; retry later', {
        retryAfterS: 2,
      });
    }
    return { status: res.status, body: res.body, retryAfterS: res.retryAfterS };
  }
}

/**
 * An answer of the adapter's (or of the sidecar's own making) as its operation's result: a 2xx's
 * JSON text passed on as it came, an object as it is; a refusal thrown, as the adapter gave it.
 */
function result<N extends OperationName>(answer: Answer): Result<N> {
  const status = answer.status ?? 200;
  if (status >= 400) throw errorFromAnswer(status, answer.body, answer.retryAfterS);
  if (typeof answer.body === 'string') return new JsonText<Outputs[N]>(answer.body, status);
  return answer.body as Outputs[N];
}

/** A poll's wait and max, their declared defaults where the caller left them out. */
function pollOf(input: { wait?: number; max?: number }): { wait: number; max: number } {
  const [wait, max] = OPERATIONS.inbox.query;
  return { wait: input.wait ?? wait.default, max: input.max ?? max.default };
}

/** A page's after and limit, their declared defaults where the caller left them out. */
function pageOf(
  name: 'readChannel' | 'outboxDeadLetters',
  input: { after?: number; limit?: number },
): { after: number; limit: number } {
  const [after, limit] = OPERATIONS[name].query;
  return { after: input.after ?? after.default, limit: input.limit ?? limit.default };
}

/** `into`'s id lists with `mine`'s added to the lists of the same name. */
function merge(into: Record<string, unknown>, mine: Record<string, number[]>) {
  const out: Record<string, unknown> = { ...into };
  for (const [k, ids] of Object.entries(mine))
    out[k] = [...((out[k] as number[] | undefined) ?? []), ...ids];
  return out;
}

/** An answer's body as an object (the adapter's arrive as text). */
function bodyOf(answer: Answer): Record<string, unknown> {
  return (typeof answer.body === 'string' ? JSON.parse(answer.body) : answer.body) as Record<
    string,
    unknown
  >;
}

/**
 * A stored or queued send's answer with the message's creation context (its `traceparent` and
 * `tracestate`), so that the agent and MCP's `_meta` learn it. A repeat's stored context is its
 * first send's: GET /v1/messages/{id} tells it.
 */
function withTrace(answer: Answer, trace: TraceContext): Answer {
  const status = answer.status ?? 200;
  if (status >= 300) return answer;
  const fields = trace.tracestate === undefined ? { traceparent: trace.traceparent } : trace;
  if (typeof answer.body === 'object' && answer.body !== null)
    return { ...answer, body: { ...answer.body, ...fields } };
  if (typeof answer.body !== 'string' || !answer.body.endsWith('}')) return answer;
  const members = Object.entries(fields)
    .map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`)
    .join('');
  return { ...answer, body: `${answer.body.slice(0, -1)}${members}}` };
}

/** A send's span ends with what became of it: stored (its assignment), queued, or refused. */
function sendOutcome(span: Span, answer: { status: number; body: string | object }): void {
  const body = typeof answer.body === 'string' ? safeJson(answer.body) : answer.body;
  if (answer.status === 202) {
    span.event('queued', { 'agw.outbox_depth': (body as { outbox_depth?: number })?.outbox_depth });
  } else if (answer.status < 300 && body !== undefined) {
    sent(span, body as { message_id: string; channel: string });
  } else span.fail({ code: (body as { error?: string })?.error ?? String(answer.status) });
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A JSON object's bytes with the members of `add` appended (withKey's, for several). */
function withMembers(raw: Buffer, add: TraceContext): Buffer | undefined {
  let out: Buffer | undefined = raw;
  for (const [k, v] of Object.entries(add)) {
    if (v === undefined || out === undefined) continue;
    out = withMember(out, k, v);
  }
  return out;
}

/**
 * A JSON object's bytes with `"idempotency_key": key` added as its last member, as
 * `{ ...value, idempotency_key: key }` would serialize; undefined if the bytes are not one
 * object (the caller then serializes the value).
 */
function withKey(raw: Buffer, key: string): Buffer | undefined {
  return withMember(raw, 'idempotency_key', key);
}

function withMember(raw: Buffer, name: string, value: string): Buffer | undefined {
  let end = raw.length - 1;
  while (end >= 0 && isJsonSpace(raw[end]!)) end--;
  if (end < 0 || raw[end] !== 0x7d) return undefined; // '}'
  let last = end - 1;
  while (last >= 0 && isJsonSpace(raw[last]!)) last--;
  if (last < 0) return undefined;
  const empty = raw[last] === 0x7b; // '{': no member before it
  const member = `${empty ? '' : ','}${JSON.stringify(name)}:${JSON.stringify(value)}}`;
  return Buffer.concat([raw.subarray(0, end), Buffer.from(member)]);
}

function isJsonSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}
