/**
 * The schemas of the agent's operations (agent-api.ts declares them): each body's check as the
 * sidecar makes it, each MCP tool's arguments and how they map onto the operation's input, and
 * each answer's shape. The answers' schemas are what MCP lists as a tool's `outputSchema` and
 * what the OpenAPI documents say a 2xx holds; test/protocol/agent-api.test.ts holds them to what
 * the programs answer.
 */
import { z } from 'zod';
import type { Inputs, OperationName } from './agent-api.js';
import {
  checkRequest,
  deliveryIdsSchema,
  leaseExtensionSchema,
  nackSchema,
} from './delivery-ids.js';
import { EmergencyRequestSchema } from './emergency-request.js';
import { checkEnvelopeFields, EnvelopeSchema, MessageIdSchema } from './envelope.js';
import { GatewayError } from './errors.js';
import { parseJson } from './http.js';
import {
  ASK_DEFAULT_TIMEOUT_MS,
  ASK_MAX_TIMEOUT_MS,
  INBOX_DEFAULT_MAX,
  INBOX_MAX,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  SIDECAR_MAX_EXTEND_MS,
} from './limits.js';
import { PRIORITIES } from './priority.js';

/**
 * The longest `fetch_inbox` wait, s: below the HTTP inbox's 30 s, because MCP clients put a
 * deadline on every tool call (the OpenAI Agents SDK's default is 5 s, the MCP TypeScript SDK's
 * 60 s), and a call that outlives it is an error to the model while the deliveries it leased
 * wait out their lease. The default wait is 0: a runtime with a short deadline never trips it.
 */
export const MCP_MAX_WAIT_S = 25;

/**
 * The longest wait of the `ask` and `await_reply` tools, s, and their default: 50, below the
 * MCP TypeScript SDK's 60 s deadline of a tool call, so that a timeout is an answer the model
 * reads (where its message is), never a failed call. A longer wait is another await_reply.
 */
export const MCP_MAX_ASK_S = 50;

// ---- bodies, as the sidecar checks them (its own negative delivery ids allowed) ----

const IDS = { negativeToo: true } as const;

/** The emergency body, checked: a 400 `invalid_request` naming the (dotted) field at fault. */
export function checkEmergency(value: unknown): z.output<typeof EmergencyRequestSchema> {
  const parsed = EmergencyRequestSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field = issue?.path.map(String).join('.') || 'body';
  throw new GatewayError('invalid_request', `${field}: ${issue?.message ?? 'invalid'}`, { field });
}

/** How long an ask waits (POST /v1/ask `timeout_ms`), as a body field. */
const TimeoutMs = z
  .int('must be an integer')
  .min(1, `must be from 1 to ${ASK_MAX_TIMEOUT_MS}`)
  .max(ASK_MAX_TIMEOUT_MS, `must be from 1 to ${ASK_MAX_TIMEOUT_MS}`)
  .optional()
  .describe(
    `ms to wait for the reply (default ${ASK_DEFAULT_TIMEOUT_MS}); not part of the message: the same key asked again with another timeout is the same ask`,
  );

/**
 * POST /v1/ask's body: its `timeout_ms` checked here (a 400 naming it); the envelope, the rest,
 * by the send it makes, as POST /v1/messages checks it.
 */
function parseAsk(raw: Buffer): Partial<Inputs['ask']> {
  const value = parseJson(raw);
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return value as Inputs['ask'];
  const timeout = TimeoutMs.safeParse((value as { timeout_ms?: unknown }).timeout_ms);
  if (!timeout.success) {
    const why = timeout.error.issues[0]?.message ?? 'invalid';
    throw new GatewayError('invalid_request', `timeout_ms: ${why}`, { field: 'timeout_ms' });
  }
  return value as Inputs['ask'];
}

/** The send's body as the sidecar takes it (the key made when left out). */
const SendBody = EnvelopeSchema.extend({
  idempotency_key: EnvelopeSchema.shape.idempotency_key
    .optional()
    .describe('made by the sidecar (a UUIDv7) when left out'),
  payload: EnvelopeSchema.shape.payload
    .unwrap()
    .meta({ type: 'object', description: 'a JSON object; {} when left out' })
    .optional(),
});

/** A body's schema (for the documents) and its check (for the routes), by operation. */
export const BODIES: {
  readonly [N in OperationName]?: {
    readonly schema: z.ZodType;
    readonly parse: (raw: Buffer) => Partial<Inputs[N]>;
  };
} = {
  // send: the service checks the envelope (and keeps its bytes); this is its schema, the key
  // made by the sidecar when left out
  send: { schema: SendBody, parse: (raw) => parseJson(raw) as Inputs['send'] },
  ask: { schema: SendBody.extend({ timeout_ms: TimeoutMs }), parse: parseAsk },
  inboxAcking: {
    schema: deliveryIdsSchema(IDS),
    parse: (raw) => checkRequest(deliveryIdsSchema(IDS), parseJson(raw)),
  },
  ack: {
    schema: deliveryIdsSchema(IDS),
    parse: (raw) => checkRequest(deliveryIdsSchema(IDS), parseJson(raw)),
  },
  nack: { schema: nackSchema(IDS), parse: (raw) => checkRequest(nackSchema(IDS), parseJson(raw)) },
  extendLeases: {
    schema: leaseExtensionSchema(SIDECAR_MAX_EXTEND_MS, IDS),
    parse: (raw) => checkRequest(leaseExtensionSchema(SIDECAR_MAX_EXTEND_MS, IDS), parseJson(raw)),
  },
  emergency: { schema: EmergencyRequestSchema, parse: (raw) => checkEmergency(parseJson(raw)) },
};

// ---- the MCP tools' arguments ----

const E = EnvelopeSchema.shape;
const deliveryIds = deliveryIdsSchema(IDS).shape.delivery_ids.describe(
  'delivery_id values from fetch_inbox',
);
const nack = nackSchema(IDS).shape;
const extension = leaseExtensionSchema(SIDECAR_MAX_EXTEND_MS, IDS).shape;
const emergency = EmergencyRequestSchema.shape;
const bounded = (min: number, max: number, fallback: number, description: string) =>
  z
    .int()
    .min(min, `must be from ${min} to ${max}`)
    .max(max, `must be from ${min} to ${max}`)
    .default(fallback)
    .describe(description);
const NoArgs = z.strictObject({});

export interface ToolArgs<N extends OperationName> {
  readonly schema: z.ZodType;
  /** How a bad argument is reported: send_message's as the envelope's (`invalid_envelope`). */
  readonly check?: (schema: z.ZodType, value: unknown) => unknown;
  /** The checked arguments as the operation's input. */
  readonly toInput: (args: never) => Inputs[N];
}

function args<N extends OperationName, S extends z.ZodType>(
  schema: S,
  toInput: (args: z.output<S>) => Inputs[N],
  check?: ToolArgs<N>['check'],
): ToolArgs<N> {
  return { schema, toInput: toInput as (a: never) => Inputs[N], ...(check ? { check } : {}) };
}

/** What a message is, as send_message and ask take it. */
const MESSAGE_ARGS = {
  to: E.to.describe('a channel name (e.g. "product") or "@agent" for one agent'),
  kind: E.kind.describe(
    'task/request, task/update, task/result, task/cancel, signal, escalation, policy/update, status or system/ping',
  ),
  payload: E.payload.unwrap().meta({
    type: 'object',
    description:
      'a JSON object; task/request needs task_id and description, task/result task_id and status (success, failure or pending), task/update and task/cancel task_id',
  }),
  priority: E.priority.describe(
    'critical or normal; left out: critical for escalation and policy/update, else normal',
  ),
  reply_to: E.reply_to.describe(
    'the message_id of the message this answers: keeps the conversation in its thread',
  ),
};

/** The envelope's times, as send_message takes them (the envelope's own checks). */
const TIME_ARGS = {
  deliver_at: E.deliver_at.describe(
    'an RFC 3339 time (e.g. 2031-01-01T12:00:00Z) to deliver it then, not now: at most 365 days ahead; you may cancel it until then',
  ),
  ttl_ms: E.ttl_ms.describe(
    'a deadline in ms from now (from deliver_at when given): not handled by then, it is dropped as a dead letter (expired)',
  ),
  expires_at: E.expires_at.describe(
    'the same deadline as an RFC 3339 time; not together with ttl_ms',
  ),
};

/** How long the ask tools wait, s. */
const askWait = bounded(
  1,
  MCP_MAX_ASK_S,
  MCP_MAX_ASK_S,
  `seconds to wait for the answer (1 to ${MCP_MAX_ASK_S}, default ${MCP_MAX_ASK_S})`,
);

/** Each tool's arguments, by the operation it stands for (agent-api.ts names the tool). */
export const TOOL_ARGS: { readonly [N in OperationName]?: ToolArgs<N> } = {
  send: args(
    z.strictObject({
      ...MESSAGE_ARGS,
      ...TIME_ARGS,
      idempotency_key: E.idempotency_key
        .optional()
        .describe(
          'any unique string; made for you when left out. A repeat with the same key is stored once',
        ),
    }),
    (a) => a as Inputs['send'],
    checkEnvelopeFields,
  ),
  inbox: args(
    z.strictObject({
      wait_seconds: bounded(
        0,
        MCP_MAX_WAIT_S,
        0,
        `seconds to wait for a message when none is there (0 to ${MCP_MAX_WAIT_S})`,
      ),
      max: bounded(1, INBOX_MAX, INBOX_DEFAULT_MAX, `most deliveries to take (1 to ${INBOX_MAX})`),
    }),
    (a) => ({ wait: a.wait_seconds, max: a.max }),
  ),
  ack: args(z.strictObject({ delivery_ids: deliveryIds }), (a) => a),
  nack: args(
    z.strictObject({
      delivery_ids: deliveryIds,
      retry: nack.retry.describe(
        'true (default): deliver it again later; false: it can never be handled, dead-letter it now',
      ),
      reason: nack.reason.describe('why, for the sender and the operator'),
    }),
    (a) => a,
  ),
  extendLeases: args(
    z.strictObject({
      delivery_ids: deliveryIds,
      extend_ms: extension.extend_ms.describe(
        'each lease ends this many ms from now (at most the gateway maximum, 15 minutes by default)',
      ),
    }),
    (a) => a,
  ),
  messageStatus: args(
    z.strictObject({
      message_id: MessageIdSchema.describe('the message_id send_message answered'),
    }),
    (a) => a,
  ),
  journey: args(
    z.strictObject({
      id: z
        .string()
        .min(1)
        .max(128)
        .describe('the message_id of a message, or the idempotency_key of one you sent'),
    }),
    (a) => ({ message_id: a.id }),
  ),
  readChannel: args(
    z.strictObject({
      channel: E.to.describe('a channel you are a member of, or "@<you>" for your direct messages'),
      after: z
        .int()
        .min(0, 'must be a channel_sequence_id, 0 or more')
        .max(Number.MAX_SAFE_INTEGER)
        .default(0)
        .describe('read messages after this channel_sequence_id (0: from the start)'),
      limit: bounded(
        1,
        PAGE_MAX_LIMIT,
        PAGE_DEFAULT_LIMIT,
        `most messages to read (1 to ${PAGE_MAX_LIMIT})`,
      ),
    }),
    (a) => a,
  ),
  me: args(NoArgs, () => ({})),
  heartbeat: args(NoArgs, () => ({})),
  emergency: args(
    z.strictObject({
      reason: emergency.reason.describe('a short lower-case reason, e.g. manual or gateway_down'),
      message: emergency.message.describe('what is wrong, in a sentence or two, for the operator'),
    }),
    (a) => a,
  ),
  ask: args(
    z.strictObject({ ...MESSAGE_ARGS, timeout_seconds: askWait }),
    ({ timeout_seconds, ...message }) =>
      ({ ...message, timeout_ms: timeout_seconds * 1000 }) as Inputs['ask'],
    checkEnvelopeFields,
  ),
  awaitReply: args(
    z.strictObject({
      message_id: z
        .string()
        .min(1)
        .max(128)
        .describe(
          'the message_id ask answered (message.message_id), or its idempotency_key while it was queued',
        ),
      timeout_seconds: askWait,
    }),
    (a) => ({ message_id: a.message_id, timeout_ms: a.timeout_seconds * 1000 }),
  ),
};

// ---- the answers ----

const ids = z.array(z.int());
const time = z.string().describe('an ISO 8601 time, UTC');

export const MessageSchema = z
  .looseObject({
    message_id: z.string().describe('a UUIDv7'),
    channel: z.string(),
    channel_sequence_id: z
      .int()
      .min(1)
      .nullable()
      .describe('null only for a scheduled message not sent yet (GET /v1/messages/{id})'),
    sender: z.string(),
    timestamp_iso8601: time,
    idempotency_key: z.string(),
    to: z.string(),
    kind: z.string(),
    priority: z.enum(PRIORITIES),
    reply_to_sequence_id: z.int().optional(),
    reply_to: z.string().optional(),
    thread_id: z.string(),
    hop: z.int().min(0),
    traceparent: z.string().optional().describe("W3C trace context of the message's creation"),
    tracestate: z.string().optional(),
    scheduled_for: time.optional().describe('its deliver_at, when it was scheduled'),
    expires_at: time.optional().describe('its deadline: a copy not acked by then expires'),
    payload: z.record(z.string(), z.unknown()),
  })
  .describe('A stored message: the envelope and the fields the adapter added');

export const DeliverySchema = z
  .looseObject({
    delivery_id: z.int().describe("the adapter's (positive) or the sidecar's own (negative)"),
    attempt: z.int().min(1),
    lease_expires_at: time,
    message: MessageSchema,
  })
  .describe('A message handed to its recipient under a lease');

const AckResultSchema = z.looseObject({ acked: ids, dead_lettered: ids, unknown: ids });
const InboxResultSchema = z.looseObject({ deliveries: z.array(DeliverySchema) });

/** What every refusal answers (errors.md): the catalogue's code, a sentence, the field at fault. */
export const ErrorBodySchema = z
  .looseObject({
    error: z.string().describe('the error code (docs/reference/errors.md)'),
    message: z.string().describe('one sentence for a person'),
    field: z.string().optional().describe('the request field at fault, as a dotted path'),
    retry_after_s: z
      .number()
      .optional()
      .describe('MCP results only: what HTTP sends as Retry-After'),
  })
  .describe('A refusal');

/** A send's answer: stored by the adapter, or kept in the outbox. */
const SendResultSchema = z.union([
  z.looseObject({
    status: z.literal('delivered'),
    message_id: z.string(),
    channel: z.string(),
    channel_sequence_id: z
      .int()
      .min(1)
      .nullable()
      .describe('null while it is scheduled: it takes its number when it fires'),
    timestamp_iso8601: time,
    scheduled_for: time.optional().describe("a scheduled message's deliver_at"),
    expires_at: time.optional().describe('its deadline, when it has one'),
    idempotency_key: z.string(),
    priority: z.enum(PRIORITIES),
    thread_id: z.string(),
    hop: z.int().min(0),
    duplicate: z.boolean(),
    traceparent: z.string().optional().describe("the message's trace context, when it has one"),
    tracestate: z.string().optional(),
  }),
  z.looseObject({
    status: z.literal('queued'),
    idempotency_key: z.string(),
    outbox_depth: z.int().min(1),
    traceparent: z.string().optional().describe("the message's trace context, when it has one"),
    tracestate: z.string().optional(),
  }),
]);

/** An ask's reply: a delivery as the inbox gives it, with its state (wire.ts replyJson). */
export const ReplyDeliverySchema = z
  .looseObject({
    delivery_id: z.int().describe("the adapter's delivery id: ack it as any delivery"),
    attempt: z.int().min(0),
    lease_expires_at: time.nullable().describe('null once acked or dead-lettered'),
    state: z.enum(['leased', 'acked', 'dead_letter']),
    message: MessageSchema.nullable().describe('null when its stored bytes fail their checksum'),
  })
  .describe("An ask's reply: leased to the caller, or settled before and answered as it is");

const RecipientCauseSchema = z.enum([
  'acked',
  'leased',
  'waiting_for_poll',
  'waiting_behind',
  'retry_backoff',
  'paused',
  'scheduled',
  'dead_letter',
]);

/** POST /v1/ask's answer: the reply, or where the message is when the time ran out. */
const AskResultSchema = z.union([
  z.looseObject({
    status: z.literal('replied'),
    message: SendResultSchema.describe("the send's answer"),
    reply: ReplyDeliverySchema,
  }),
  z.looseObject({
    status: z.literal('timeout'),
    message: SendResultSchema.describe("the send's answer (queued: still in the outbox)"),
    recipients: z
      .array(
        z.looseObject({
          agent: z.string(),
          state: z.enum(['pending', 'leased', 'acked', 'dead_letter']),
          cause: RecipientCauseSchema,
          explanation: z.string(),
        }),
      )
      .describe("each recipient's copy, from the message's journey"),
  }),
]);

export const OUTPUTS: { readonly [N in OperationName]: z.ZodType } = {
  send: SendResultSchema,
  ask: AskResultSchema,
  awaitReply: AskResultSchema,
  inbox: InboxResultSchema,
  inboxAcking: z.looseObject({ ...AckResultSchema.shape, ...InboxResultSchema.shape }),
  ack: AckResultSchema,
  nack: z.looseObject({ nacked: ids, ignored: ids, unknown: ids }),
  extendLeases: z.looseObject({
    leases: z.array(z.looseObject({ delivery_id: z.int(), lease_expires_at: time })),
  }),
  messageStatus: z.looseObject({
    message: MessageSchema,
    recipients: z.array(
      z.looseObject({
        agent: z.string(),
        state: z.enum(['pending', 'leased', 'acked', 'dead_letter']),
        attempts: z.int().min(0),
        reason: z.string().nullable(),
        note: z.string().optional(),
      }),
    ),
  }),
  journey: z.union([
    z.looseObject({
      message: MessageSchema.nullable().describe('null when its stored bytes fail their checksum'),
      accepted_at: time,
      recipients: z.array(
        z.looseObject({
          agent: z.string(),
          state: z.enum(['pending', 'leased', 'acked', 'dead_letter']),
          attempts: z.int().min(0),
          reason: z.string().nullable(),
          note: z.string().nullable(),
          cause: RecipientCauseSchema,
          explanation: z.string(),
          last_poll: time.nullable(),
          waiting_behind: z
            .looseObject({
              message_id: z.string(),
              channel_sequence_id: z.int(),
              cause: z.string(),
            })
            .nullable(),
          events: z.array(
            z.looseObject({
              at: time,
              event: z.string(),
              attempt: z.int().min(0),
              detail: z.record(z.string(), z.unknown()).nullable(),
            }),
          ),
        }),
      ),
    }),
    z.looseObject({
      idempotency_key: z.string(),
      cause: z.enum(['queued_at_sender', 'refused_at_sender']),
      explanation: z.string(),
      outbox: z.looseObject({
        since: time,
        tries: z.int().min(0),
        last_error: z.string().nullable(),
        breaker: z.enum(['closed', 'open', 'half_open']),
        status: z.int().optional(),
        answer: z.unknown().optional(),
      }),
      recipients: z.array(z.never()).max(0),
    }),
  ]),
  me: z.looseObject({
    agent: z.string(),
    channels: z.array(z.looseObject({ name: z.string(), members: z.array(z.string()) })),
    alerts_to: z.string(),
    limits: z.looseObject({
      max_message_bytes: z.int(),
      max_batch: z.int(),
      max_depth: z.int(),
    }),
  }),
  heartbeat: z.looseObject({ pending: z.int().min(0), critical_pending: z.int().min(0) }),
  readChannel: z.looseObject({
    messages: z.array(MessageSchema),
    delivery_states: z.record(z.string(), z.string()),
    next_after: z.int().nullable(),
  }),
  emergency: z.looseObject({
    status: z.literal('written'),
    clipped: z.boolean().optional(),
    reason: z.literal('manual').optional(),
    requested_reason: z.string().optional(),
  }),
  status: z.looseObject({
    agent_id: z.string(),
    adapter_url: z.string(),
    ready: z.boolean(),
    breaker: z.looseObject({
      state: z.enum(['closed', 'open', 'half_open']),
      step: z.int(),
      openedAt: z.number().nullable(),
      resetMs: z.number(),
    }),
    outbox: z.looseObject({ depth: z.int(), capacity: z.int(), dead_letters: z.int() }),
    last_adapter_contact: time.nullable(),
    last_error: z.string().nullable(),
  }),
  outboxDeadLetters: z.looseObject({
    dead_letters: z.array(
      z.looseObject({
        id: z.int(),
        idempotency_key: z.string(),
        status: z.int().describe("the adapter's status that refused it"),
        answer: z.unknown().describe("the adapter's answer that refused it"),
        dead_lettered_at: time,
        message: z.record(z.string(), z.unknown()).describe('the envelope as it was queued'),
      }),
    ),
  }),
};

/**
 * A schema as JSON Schema: draft-7 for MCP (what its clients expect), 2020-12 for OpenAPI 3.1.
 * `io`: input (a field with a default is optional to the caller) or output. A custom check has
 * no JSON Schema of its own: its meta says what it is.
 */
export function jsonSchemaOf(
  schema: z.ZodType,
  opts: { target: 'draft-7' | 'draft-2020-12'; io: 'input' | 'output' },
): Record<string, unknown> {
  const { $schema: _, ...json } = z.toJSONSchema(schema, {
    target: opts.target,
    io: opts.io,
    unrepresentable: 'any',
    reused: 'inline',
  }) as Record<string, unknown>;
  return json;
}
