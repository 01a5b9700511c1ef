/**
 * Messages: the write path (POST /v1/messages and /v1/messages/batch) and channel replay. A body
 * is checked, routed and turned into a draft here; the group commit stores it; only then is the
 * sender answered.
 */
import { type Assignment, parseEnvelope } from '../protocol/envelope.js';
import { GatewayError, isGatewayError } from '../protocol/errors.js';
import { fingerprint } from '../protocol/fingerprint.js';
import { parseJson } from '../protocol/http.js';
import { MAX_BATCH, pageBudget } from '../protocol/limits.js';
import type { TraceContext } from '../protocol/trace-context.js';
import { messageIdOf, sequenceOf } from '../protocol/wire.js';
import type { AppendOutcome, MessageDraft, Store } from '../store/store.js';
import { sent, startSend } from '../telemetry/messaging.js';
import type { Span, Tracing } from '../telemetry/tracing.js';
import type { GroupCommit } from './group-commit.js';
import { pageParts } from './response-budget.js';
import { assertReader, readableChannels, route } from './routing.js';
import type { SendRates } from './send-rate.js';
import { OPERATOR_PREFIX, type Topology } from './topology.js';

export interface WriteContext {
  readonly topology: Topology;
  readonly store: Store;
  readonly commits: GroupCommit;
  readonly maxMessageBytes: number;
  /** The clock: receipt times come from it. */
  readonly now: () => number;
  /** Each sender's token bucket (send-rate.ts). */
  readonly rates: SendRates;
  /** Spans (telemetry/tracing.ts): NO_TRACING unless OTEL_* asks for traces. */
  readonly tracing: Tracing;
  /** How far ahead deliver_at may be, ms (AGW_MAX_SCHEDULE_DAYS). Default 365 days. */
  readonly maxScheduleMs?: number;
}

/** AGW_MAX_SCHEDULE_DAYS's default, in ms. */
export const DEFAULT_MAX_SCHEDULE_MS = 365 * 24 * 3600 * 1000;

export type Ack = Assignment & { duplicate: boolean };

export type BatchResult =
  | ({ status: 201 | 200 } & Ack)
  | { status: number; error: string; message: string; field?: string; retry_after_s?: number };

/**
 * `headers`: the request's trace context, taken for a message whose body has none (a malformed
 * header was ignored before it came here).
 */
export async function postMessage(
  ctx: WriteContext,
  sender: string,
  body: Buffer,
  headers?: TraceContext,
): Promise<{ status: 201 | 200; ack: Ack }> {
  let draft = toDraft(ctx, sender, parseJson(body), ctx.now(), headers);
  const span = ctx.tracing.on ? sendSpan(ctx, draft) : undefined;
  if (span !== undefined) draft = traced(draft, span);
  try {
    await takeToken(ctx, draft);
    const [outcome] = await commit(ctx, [draft], span && [span]);
    if (outcome === undefined) throw new Error('group commit returned no outcome');
    if (outcome.status === 'rejected') throw outcome.error;
    return {
      status: outcome.status,
      ack: { ...outcome.assignment, duplicate: outcome.status === 200 },
    };
  } catch (err) {
    span?.fail(err);
    throw err;
  } finally {
    span?.end();
  }
}

/**
 * Each item is answered in order, with the status it would have had alone; the accepted ones
 * are committed together, in the order given, in one transaction. Except for the rate: once an
 * item finds its sender's bucket empty, it and every item after it are refused 429 (not even
 * parsed), so that nothing after a refused item is stored before it and a drain that sends them
 * again keeps their order.
 */
export async function postBatch(
  ctx: WriteContext,
  sender: string,
  body: Buffer,
  headers?: TraceContext,
): Promise<BatchResult[]> {
  const value = parseJson(body) as { messages?: unknown } | null;
  const items = typeof value === 'object' && value !== null ? value.messages : undefined;
  if (!Array.isArray(items) || items.length === 0 || items.length > MAX_BATCH) {
    throw new GatewayError(
      'invalid_request',
      `messages: must be an array of 1 to ${MAX_BATCH} envelopes`,
      { field: 'messages' },
    );
  }
  const receivedAt = ctx.now();
  const results: BatchResult[] = new Array(items.length);
  const drafts: MessageDraft[] = [];
  const spans: Span[] | undefined = ctx.tracing.on ? [] : undefined;
  const positions: number[] = [];
  let limited: { at: number; retryAfterS: number } | undefined;
  for (const [i, item] of items.entries()) {
    if (limited !== undefined) {
      results[i] = errorResult(
        new GatewayError(
          'rate_limited',
          `message ${i} comes after message ${limited.at}, which was rate limited: refused too, so that the batch's order holds`,
          { retryAfterS: limited.retryAfterS },
        ),
      );
      continue;
    }
    try {
      let draft = checkedItem(ctx, sender, item, i, receivedAt, headers);
      await takeToken(ctx, draft);
      if (spans !== undefined) {
        const span = sendSpan(ctx, draft);
        draft = traced(draft, span);
        spans.push(span);
      }
      drafts.push(draft);
      positions.push(i);
    } catch (err) {
      // a store that cannot say whether a key is stored (takeToken) fails the batch, retryably
      if (!isGatewayError(err)) throw err;
      if (err.code === 'rate_limited') limited = { at: i, retryAfterS: err.retryAfterS ?? 1 };
      results[i] = errorResult(err);
    }
  }
  if (drafts.length > 0) {
    try {
      const outcomes = await commit(ctx, drafts, spans);
      outcomes.forEach((o, j) => {
        results[positions[j]!] =
          o.status === 'rejected'
            ? errorResult(o.error)
            : { status: o.status, ...o.assignment, duplicate: o.status === 200 };
      });
    } catch (err) {
      for (const span of spans ?? []) span.fail(err);
      throw err;
    } finally {
      for (const span of spans ?? []) span.end();
    }
  }
  return results;
}

/**
 * The drafts committed in one group. With spans (one per draft, tracing on), each gets the
 * commit as a child span (the time from asking to its group's durable end) and its outcome.
 */
async function commit(
  ctx: WriteContext,
  drafts: MessageDraft[],
  spans: readonly Span[] | undefined,
): Promise<AppendOutcome[]> {
  if (spans === undefined) return ctx.commits.run({ op: 'append', drafts });
  const began = preciseNow();
  const outcomes = await ctx.commits.run({ op: 'append', drafts });
  const ended = preciseNow();
  outcomes.forEach((o, j) => {
    const span = spans[j]!;
    ctx.tracing
      .start('commit', 'internal', {
        parent: span.context,
        startTime: began,
        attributes: { 'messaging.batch.message_count': drafts.length },
      })
      .end(ended);
    if (o.status === 'rejected') span.fail(o.error);
    else {
      sent(span, o.assignment);
      if (o.status === 200) span.set({ 'agw.duplicate': true });
    }
  });
  return outcomes;
}

/** Now in ms since the epoch, to the microsecond (Date.now() rounds a commit to whole ms). */
function preciseNow(): number {
  return performance.timeOrigin + performance.now();
}

/** The adapter's `send <channel>` span of a draft: a child of the message's creation context. */
function sendSpan(ctx: WriteContext, draft: MessageDraft): Span {
  return startSend(ctx.tracing, draft.channel, draft.trace, draft.sender);
}

/** A message that came with no context takes its adapter span's: the trace starts here. */
function traced(draft: MessageDraft, span: Span): MessageDraft {
  return draft.trace !== undefined || span.context === undefined
    ? draft
    : { ...draft, trace: span.context };
}

/**
 * A page of a channel's history, for its members, in sequence order, with the state of the
 * reader's own delivery of each message it had one of (`delivery_states`, by message_id): a
 * sidecar repairing a gap hands over only what was acked elsewhere, never what was evicted or
 * dead-lettered for its agent. The page ends early at `maxPageBytes` (holding one message at
 * least); `next_after` is the `after` of the next page (the last sequence on this one), null
 * when this one is empty: a reader goes on until then, never stops at a short page. Answered as
 * the parts of its JSON, which the route writes out as the client takes them.
 */
export async function readChannel(
  ctx: WriteContext,
  reader: string,
  channel: string,
  after: number,
  limit: number,
  maxPageBytes: number,
): Promise<string[]> {
  assertReader(ctx.topology, reader, channel);
  const rows = await ctx.store.channelMessages(channel, after, limit, pageBudget(maxPageBytes));
  if (rows.length === 0) return ['{"messages":[],"delivery_states":{},"next_after":null}'];
  const last = sequenceOf(rows[rows.length - 1]!);
  // a window that holds the page (its sequences are distinct, from after + 1 to last), less
  // what it holds beyond the page: the page's bound covers the states of its own messages only
  const window = await ctx.store.pageDeliveries(
    reader,
    channel,
    after,
    Math.min(limit, last - after),
  );
  const states: Record<string, string> = {};
  for (const id of rows.map(messageIdOf)) if (Object.hasOwn(window, id)) states[id] = window[id]!;
  return pageParts(
    '{"messages":[',
    rows,
    `],"delivery_states":${JSON.stringify(states)},"next_after":${last}}`,
  );
}

/**
 * One item of a batch, checked and turned into a draft. Whatever it throws is that item's own
 * answer: a refusal from the catalogue as it is, anything else (a check meeting input it did not
 * foresee) a 400 naming the item, so that one odd envelope never fails the others with a 500.
 */
function checkedItem(
  ctx: WriteContext,
  sender: string,
  item: unknown,
  i: number,
  receivedAt: number,
  headers: TraceContext | undefined,
): MessageDraft {
  try {
    // checked first: a payload nested past the bound never reaches JSON.stringify below
    const draft = toDraft(ctx, sender, item, receivedAt, headers);
    const size = Buffer.byteLength(JSON.stringify(item));
    if (size > ctx.maxMessageBytes) {
      throw new GatewayError(
        'payload_too_large',
        `message ${i} is ${size} bytes; the limit is ${ctx.maxMessageBytes}`,
      );
    }
    return draft;
  } catch (err) {
    if (isGatewayError(err)) throw err;
    throw new GatewayError(
      'invalid_request',
      `messages.${i}: could not be checked, so it is refused`,
      {
        field: `messages.${i}`,
        cause: err,
      },
    );
  }
}

function toDraft(
  ctx: WriteContext,
  sender: string,
  value: unknown,
  receivedAt: number,
  headers?: TraceContext,
): MessageDraft {
  const envelope = parseEnvelope(value);
  if (envelope.sender !== undefined && envelope.sender !== sender) {
    throw new GatewayError(
      'sender_mismatch',
      `the token is ${sender}'s but the body says sender "${envelope.sender}"`,
      {
        field: 'sender',
      },
    );
  }
  const { channel, recipients } = route(ctx.topology, sender, envelope.to);
  return {
    sender,
    idempotencyKey: envelope.idempotency_key,
    fingerprint: fingerprint(envelope),
    channel,
    kind: envelope.kind,
    priority: envelope.priority,
    replyTo: envelope.reply_to_sequence_id ?? null,
    replyToId: envelope.reply_to ?? null,
    readable: readableChannels(ctx.topology, sender),
    payloadJson: JSON.stringify(envelope.payload),
    receivedAt,
    recipients,
    ...traceOf(envelope, headers),
    ...timesOf(envelope, receivedAt, ctx.maxScheduleMs ?? DEFAULT_MAX_SCHEDULE_MS),
    ...auditedAs(ctx.topology, sender),
  };
}

/**
 * Whose messages the audit log records, with the message in its transaction, whichever route
 * they came by (a sidecar forwards in batches): an operator's, and the alerts_to agent's
 * continuations of a thread (rules/operators.ts messageAudit).
 */
function auditedAs(topology: Topology, sender: string): Pick<MessageDraft, 'audited'> {
  if (sender.startsWith(OPERATOR_PREFIX)) return { audited: 'message' };
  if (sender === topology.alertsTo) return { audited: 'continuation' };
  return {};
}

/**
 * The envelope's times as the store keeps them (docs/design/time.md): when it is to be sent
 * (only when after receipt), and its deadline, ttl_ms counted from receipt or from deliver_at. A
 * deadline already past is refused by the store, after the idempotency key, so that a retry of a
 * stored message is still its duplicate.
 */
function timesOf(
  e: { expires_at?: string; ttl_ms?: number; deliver_at?: string },
  receivedAt: number,
  maxScheduleMs: number,
): { deliverAt?: number; expiresAt?: number } {
  const asked = e.deliver_at === undefined ? undefined : Date.parse(e.deliver_at);
  if (asked !== undefined && asked - receivedAt > maxScheduleMs) {
    const days = Math.round(maxScheduleMs / 86_400_000);
    throw new GatewayError(
      'invalid_envelope',
      `deliver_at: is more than ${days} days ahead (AGW_MAX_SCHEDULE_DAYS)`,
      { field: 'deliver_at' },
    );
  }
  const deliverAt = asked !== undefined && asked > receivedAt ? asked : undefined;
  const expiresAt =
    e.expires_at !== undefined
      ? Date.parse(e.expires_at)
      : e.ttl_ms !== undefined
        ? (deliverAt ?? receivedAt) + e.ttl_ms
        : undefined;
  if (expiresAt !== undefined && deliverAt !== undefined && expiresAt <= deliverAt) {
    throw new GatewayError('invalid_envelope', 'expires_at: is not after deliver_at', {
      field: 'expires_at',
    });
  }
  return {
    ...(deliverAt === undefined ? {} : { deliverAt }),
    ...(expiresAt === undefined ? {} : { expiresAt }),
  };
}

/** The envelope's trace context, else the request's headers', else none. */
function traceOf(
  e: { traceparent?: string; tracestate?: string },
  headers: TraceContext | undefined,
): { trace?: TraceContext } {
  if (e.traceparent === undefined) return headers === undefined ? {} : { trace: headers };
  return {
    trace:
      e.tracestate === undefined
        ? { traceparent: e.traceparent }
        : { traceparent: e.traceparent, tracestate: e.tracestate },
  };
}

/**
 * One token of the sender's bucket for a draft that passed validation; 429 rate_limited when
 * there is none. A repeat of a stored key takes none: it stores nothing, and a sidecar sending
 * a batch again after a lost answer must not be refused for what is already in. (Two sends of
 * one new key that meet in one group commit both take a token, since neither is stored when it
 * is asked; the second is then answered as a duplicate. A token, no more.)
 */
async function takeToken(ctx: WriteContext, draft: MessageDraft): Promise<void> {
  if (!ctx.rates.limits(draft.sender)) return;
  if (await ctx.store.isStored(draft.sender, draft.idempotencyKey)) return;
  ctx.rates.take(draft.sender);
}

/** A 429 says when to come back: in a batch, as `retry_after_s` (there is no header per item). */
function errorResult(err: GatewayError): BatchResult {
  return err.status === 429 && err.retryAfterS !== undefined
    ? { status: err.status, ...err.toJSON(), retry_after_s: err.retryAfterS }
    : { status: err.status, ...err.toJSON() };
}
