/**
 * The message envelope (docs/reference/adapter-api.md, "POST /v1/messages"): what a sender
 * posts, checked with zod, and the fields the adapter adds. Shared by the adapter, the sidecar
 * and the client.
 */
import { z } from 'zod';
import { GatewayError, isGatewayError } from './errors.js';
import { UUIDV7_PATTERN } from './ids.js';
import { MAX_DEPTH } from './limits.js';
import { PRIORITIES, type Priority } from './priority.js';
import { isTraceparent, isTracestate, TRACEPARENT_RULE, TRACESTATE_RULE } from './trace-context.js';

export { PRIORITIES, type Priority } from './priority.js';

/**
 * Kinds that are critical when the sender leaves `priority` out (docs/reference/adapter-api.md,
 * "POST /v1/messages"): an escalation or a policy change must never be the one a full queue
 * evicts.
 */
export const CRITICAL_KINDS: ReadonlySet<string> = new Set(['escalation', 'policy/update']);

/** Kinds only the adapter itself sends (sender "adapter"); an agent posting one gets a 400. */
export const ADAPTER_KIND_PREFIX = 'alert/';

/** The sender id of messages the adapter writes itself; no agent may take it. */
export const ADAPTER_SENDER = 'adapter';

/** Agent ids and channel names: short, URL-safe, case-sensitive. */
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const KIND_PATTERN = /^[a-z][a-z0-9_.-]*(\/[a-z0-9_.-]+)*$/;
/** Printable ASCII without spaces: a UUID fits, and so does any key a client may already use. */
const KEY_PATTERN = /^[\x21-\x7e]{1,128}$/;

const taskId = z.string().min(1).max(200);

/**
 * Payload schemas of the task kinds (docs/reference/adapter-api.md, "POST /v1/messages"). Extra
 * fields are kept: the schema says what must be there, not what may not. A Map, not an object
 * literal: the kind is the sender's string, and `{}["constructor"]` is Object, which answered kind
 * "constructor" with a 500.
 */
export const PAYLOAD_SCHEMAS: ReadonlyMap<string, z.ZodType> = new Map<string, z.ZodType>([
  ['task/request', z.looseObject({ task_id: taskId, description: z.string().min(1) })],
  ['task/update', z.looseObject({ task_id: taskId })],
  [
    'task/result',
    z.looseObject({
      task_id: taskId,
      status: z.enum(['success', 'failure', 'pending']),
      reason: z.string().optional(),
    }),
  ],
  ['task/cancel', z.looseObject({ task_id: taskId })],
]);

/**
 * A JSON object, passed on as parsed. z.record would build a copy key by key, and assigning an
 * own `__proto__` key (JSON.parse makes them) sets the copy's prototype instead: the key would
 * vanish from the stored payload without a word.
 */
const jsonObject = z.custom<Record<string, unknown>>(
  (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
  { error: 'must be a JSON object' },
);

/** A message_id: a UUIDv7 (anything else names no message). */
export const MessageIdSchema = z.string().regex(UUIDV7_PATTERN, 'must be a message_id (a UUIDv7)');

/** Ten years, ms: past any AGW_MAX_SCHEDULE_DAYS and any sane deadline. */
export const MAX_TIME_AHEAD_MS = 10 * 366 * 24 * 3600 * 1000;

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;
const RFC3339_RULE = 'must be an RFC 3339 time with its offset, such as 2026-12-06T12:00:00Z';

/** An RFC 3339 date-time with an offset that names a real instant. */
function isRfc3339(s: string): boolean {
  return RFC3339.test(s) && Number.isFinite(Date.parse(s));
}

export const EnvelopeSchema = z.strictObject({
  idempotency_key: z.string().regex(KEY_PATTERN, 'must be 1-128 printable ASCII characters'),
  to: z
    .string()
    .regex(/^@?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, 'must be a channel name or @agent')
    .refine((to) => to !== `@${ADAPTER_SENDER}`, 'the adapter takes no direct messages'),
  kind: z
    .string()
    .max(64)
    .regex(KIND_PATTERN, 'must be a short lowercase kind such as task/request')
    .refine((k) => !k.startsWith(ADAPTER_KIND_PREFIX), 'alert/ kinds are sent by the adapter only'),
  /** Left out: critical for CRITICAL_KINDS, else normal (parseEnvelope resolves it). */
  priority: z.enum(PRIORITIES).optional(),
  /** A sequence of the channel the message travels in: the message it answers. */
  reply_to_sequence_id: z.int().positive().max(Number.MAX_SAFE_INTEGER).nullable().optional(),
  /**
   * The message_id of the message it answers, in any channel the sender could see (threads:
   * docs/reference/adapter-api.md, "Threads and budgets"). A message_id is a UUIDv7; anything
   * else is a 400.
   */
  reply_to: MessageIdSchema.nullable().optional(),
  payload: jsonObject.default({}),
  /** Optional; when present it must name the authenticated agent (else 403 sender_mismatch). */
  sender: z.string().optional(),
  /**
   * W3C trace context of the message's creation (CONTRACT.md, "Trace context"): stored and
   * handed out with it. Not part of the fingerprint: a retry made in another span is the same
   * message.
   */
  traceparent: z.string().refine(isTraceparent, TRACEPARENT_RULE).optional(),
  tracestate: z.string().refine(isTracestate, TRACESTATE_RULE).optional(),
  /**
   * Its deadline (docs/design/time.md): a copy not acked by then is never handed over again and
   * becomes a dead letter `expired`. Past at receipt: 400 (decided after the idempotency key).
   */
  expires_at: z.string().refine(isRfc3339, RFC3339_RULE).optional(),
  /** The same as a duration from receipt (or from deliver_at); not with expires_at. */
  ttl_ms: z.int().positive().max(MAX_TIME_AHEAD_MS).optional(),
  /** Sent when due, at most AGW_MAX_SCHEDULE_DAYS ahead; at or before receipt: sent now. */
  deliver_at: z.string().refine(isRfc3339, RFC3339_RULE).optional(),
});

/** A checked envelope, its priority resolved. */
export type Envelope = z.output<typeof EnvelopeSchema> & { readonly priority: Priority };

/** What the adapter assigns and returns in its acknowledgement. */
export interface Assignment {
  message_id: string;
  channel: string;
  /** Null while the message is scheduled: it takes its number when it fires. */
  channel_sequence_id: number | null;
  timestamp_iso8601: string;
  /** A scheduled message's deliver_at (ISO 8601), until and after it fires; absent otherwise. */
  scheduled_for?: string;
  /** Its deadline (ISO 8601), when it has one. */
  expires_at?: string;
  idempotency_key: string;
  /** As resolved: the sender's, or the kind's default. */
  priority: Priority;
  /** The thread: the replied-to message's, or this message's own message_id when it starts one. */
  thread_id: string;
  /** Replies between it and the last continuation of its chain: 0 for a root or a continuation. */
  hop: number;
}

/**
 * Checks a parsed JSON value against the envelope and, for the task kinds, the payload schema.
 * Throws a 400 `invalid_envelope` naming the first field at fault. A check that fails in a way
 * it did not foresee is the sender's input meeting a bug, not a reason to retry: it is a 400
 * `invalid_request` naming the field being checked, never a retryable 500 `internal` (which
 * the sidecar would keep in its outbox and send again forever).
 */
export function parseEnvelope(value: unknown): Envelope {
  const at = { field: 'body' };
  try {
    return checkEnvelope(value, at);
  } catch (err) {
    throw unforeseen(err, at.field);
  }
}

function checkEnvelope(value: unknown, at: { field: string }): Envelope {
  const base = EnvelopeSchema.safeParse(value);
  if (!base.success) throw fieldError(base.error, '');
  at.field = 'payload';
  const shape = shapeOf(base.data.payload);
  if (shape.depth > MAX_DEPTH) {
    throw new GatewayError('invalid_envelope', `payload: nests deeper than ${MAX_DEPTH} levels`, {
      field: 'payload',
    });
  }
  if (shape.inexact) {
    const where = ['payload', ...inexactPath(base.data.payload)!].join('.');
    throw new GatewayError(
      'invalid_envelope',
      `${where}: a number beyond ±${Number.MAX_SAFE_INTEGER} (2^53−1) would not be kept exactly; send it as a string`,
      { field: where },
    );
  }
  at.field = 'kind';
  const schema = PAYLOAD_SCHEMAS.get(base.data.kind);
  if (schema !== undefined) {
    at.field = 'payload';
    const payload = schema.safeParse(base.data.payload);
    if (!payload.success) throw fieldError(payload.error, 'payload');
  }
  if (base.data.tracestate !== undefined && base.data.traceparent === undefined) {
    throw new GatewayError('invalid_envelope', 'tracestate: comes only with a traceparent', {
      field: 'tracestate',
    });
  }
  if (base.data.ttl_ms !== undefined && base.data.expires_at !== undefined) {
    throw new GatewayError('invalid_envelope', 'ttl_ms: give expires_at or ttl_ms, not both', {
      field: 'ttl_ms',
    });
  }
  at.field = 'priority';
  const priority =
    base.data.priority ?? (CRITICAL_KINDS.has(base.data.kind) ? 'critical' : 'normal');
  return { ...base.data, priority };
}

/**
 * How deep objects and arrays nest in a value (the payload itself is 1), without recursion; and
 * whether it holds a number that would not be kept exactly: an integer beyond 2^53−1, which
 * JSON.parse has already rounded (9007199254740993 reads as ...992), or one past the doubles
 * (1e999 reads as Infinity, which JSON.stringify writes as null). Such a payload is refused
 * rather than stored altered; a float that large is an integer to JavaScript too and is refused
 * with it, a rare price for never changing a sender's digits.
 */
function shapeOf(value: unknown): { depth: number; inexact: boolean } {
  let deepest = 0;
  let inexact = false;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) {
      if (typeof v === 'number' && isInexact(v)) inexact = true;
      continue;
    }
    if (depth > deepest) deepest = depth;
    if (depth > MAX_DEPTH) break;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return { depth: deepest, inexact };
}

function isInexact(n: number): boolean {
  return !Number.isFinite(n) || (Number.isInteger(n) && !Number.isSafeInteger(n));
}

/** The keys leading to the first inexact number (the value is at most MAX_DEPTH deep). */
function inexactPath(v: unknown): string[] | undefined {
  if (typeof v === 'number') return isInexact(v) ? [] : undefined;
  if (typeof v !== 'object' || v === null) return undefined;
  for (const [key, child] of Object.entries(v)) {
    const rest = inexactPath(child);
    if (rest !== undefined) return [key, ...rest];
  }
  return undefined;
}

/**
 * A value checked against a schema built of the envelope's fields (the MCP tool send_message's
 * arguments): a 400 `invalid_envelope` naming the first field at fault, as parseEnvelope's.
 */
export function checkEnvelopeFields<T>(schema: z.ZodType<T>, value: unknown): T {
  let parsed: z.ZodSafeParseResult<T>;
  try {
    parsed = schema.safeParse(value);
  } catch (err) {
    throw unforeseen(err, 'body');
  }
  if (!parsed.success) throw fieldError(parsed.error, '');
  return parsed.data;
}

/** A GatewayError as it is; anything else thrown while checking `field`: a 400 naming it. */
function unforeseen(err: unknown, field: string): GatewayError {
  if (isGatewayError(err)) return err;
  // the sentence names the field, not the bug: a stack's words are no help to a sender
  return new GatewayError('invalid_request', `${field}: could not be checked, so it is refused`, {
    field,
    cause: err,
  });
}

function fieldError(error: z.ZodError, prefix: string): GatewayError {
  const issue = error.issues[0];
  const path = issue?.path.map(String) ?? [];
  let message = issue?.message ?? 'invalid';
  if (issue?.code === 'unrecognized_keys') {
    path.push(issue.keys[0] ?? '');
    message = 'is not a field of the envelope';
  }
  const where = [prefix, ...path].filter((p) => p !== '').join('.') || 'body';
  return new GatewayError('invalid_envelope', `${where}: ${message}`, { field: where });
}
