/**
 * The adapter's OpenAPI document (GET /openapi.json): every route of routes.ts. The paths it
 * shares with the sidecar reuse the agent operations' declarations (agent-api.ts) and schemas,
 * with the adapter's differences: a bearer token, the adapter's own (positive) delivery ids, a
 * send answered only once stored (no outbox) and whose envelope carries its idempotency key.
 * test/protocol/openapi-documents-lint.test.ts holds it to the route table.
 */
import { z } from 'zod';
import {
  OPERATIONS,
  type Operation,
  type OperationName,
  type QueryParam,
} from '../protocol/agent-api.js';
import { MessageSchema, ReplyDeliverySchema } from '../protocol/agent-schemas.js';
import { deliveryIdsSchema, leaseExtensionSchema, nackSchema } from '../protocol/delivery-ids.js';
import { EnvelopeSchema } from '../protocol/envelope.js';
import type { ErrorCode } from '../protocol/errors.js';
import {
  DEFAULT_MAX_LEASE_MS,
  MAX_BATCH,
  MAX_REPLY_WAIT_S,
  PAGE_MAX_LIMIT,
} from '../protocol/limits.js';
import {
  agentDocOperation,
  type DocOperation,
  openApiDocument,
  type TextQueryParam,
  withEveryCallErrors,
} from '../protocol/openapi.js';
import { PRIORITIES } from '../protocol/priority.js';
import type { DeadLetterReason } from '../store/store.js';
import { MAX_REDRIVE_IDS, MAX_TEXT, REDRIVE_RATE } from './operators.js';

const time = z.string().describe('an ISO 8601 time, UTC');
const status = (value: string) => z.looseObject({ status: z.literal(value) });

/** The envelope as the adapter takes it: the idempotency key is the sender's to set. */
const Envelope = EnvelopeSchema.extend({
  payload: EnvelopeSchema.shape.payload
    .unwrap()
    .meta({ type: 'object', description: 'a JSON object; {} when left out' })
    .optional(),
});

/** A stored send's acknowledgement: what the adapter assigned, and whether it was a repeat. */
const Ack = z.looseObject({
  message_id: z.string().describe('a UUIDv7'),
  channel: z.string(),
  channel_sequence_id: z
    .int()
    .min(1)
    .nullable()
    .describe('null while it is scheduled (deliver_at): it takes its number when it fires'),
  timestamp_iso8601: time,
  idempotency_key: z.string(),
  priority: z.enum(PRIORITIES),
  thread_id: z.string().describe('the message_id of the thread it joined, or its own'),
  hop: z.int().min(0),
  scheduled_for: time.optional().describe('a scheduled message’s deliver_at'),
  expires_at: time.optional().describe('its deadline, when it has one'),
  duplicate: z.boolean().describe('true for a repeat of a stored idempotency key'),
});

const BatchResult = z.union([
  Ack.extend({ status: z.literal([201, 200]) }),
  z
    .looseObject({
      status: z.int().min(400),
      error: z.string().describe('the error code (docs/reference/errors.md)'),
      message: z.string(),
      field: z.string().optional(),
      retry_after_s: z.number().optional().describe('what a single send would get as Retry-After'),
    })
    .describe('An envelope refused on its own'),
]);

const nextAfter = z.int().nullable().describe('the `after` of the next page; null once empty');

const DEAD_LETTER_REASONS = [
  'lease_expired',
  'nacked',
  'rejected',
  'evicted',
  'queue_full',
  'integrity',
] as const satisfies readonly DeadLetterReason[];

const DeadLetter = z.looseObject({
  id: z.int().min(1),
  reason: z.enum(DEAD_LETTER_REASONS),
  note: z.string().nullable().describe("the agent's reason when it rejected the message"),
  attempts: z.int().min(0),
  recipient: z.string(),
  dead_lettered_at: time,
  replay_delivery_id: z.int().nullable(),
  message: MessageSchema.nullable().describe(
    'null for `integrity`: corrupt bytes are never served',
  ),
});

/** An agent of GET /v1/agents: its queue, its last contact, its pause. */
const AgentRow = z.looseObject({
  id: z.string(),
  role: z.string().nullable(),
  last_poll: time.nullable().describe('its last poll the store has seen; null: never'),
  pending: z.int().min(0).describe('deliveries waiting to be handed out, or for their retry'),
  critical_pending: z.int().min(0),
  leased: z.int().min(0),
  dead_letters: z.int().min(0).describe('its open dead letters (not replayed or redriven)'),
  stalled: z.boolean().describe('in a stall it was alerted for (`alert/stalled`, AGW_STALL_S)'),
  paused: z.boolean(),
  paused_since: time.nullable(),
  paused_by: z.string().nullable().describe('the operator, `operator:<id>`'),
  last_seen: time.nullable().describe('its last contact (a heartbeat)'),
  queue_depth: z.int().min(0).describe('pending plus leased (the older name)'),
  critical_depth: z.int().min(0).describe('critical pending plus leased'),
});

/** An agent's pause after POST /v1/agents/{id}/pause or /resume. */
const PauseAnswer = z.looseObject({
  agent: z.string(),
  paused: z.boolean(),
  since: time.nullable(),
  by: z.string().nullable().describe('the operator who paused it, `operator:<id>`'),
  changed: z.boolean().describe('false when it was so already (nothing written)'),
});

const text = z.string().max(MAX_TEXT);
const rate = z
  .int()
  .min(REDRIVE_RATE.min)
  .max(REDRIVE_RATE.max)
  .default(REDRIVE_RATE.default)
  .describe('dead letters a second');
/** POST /v1/dead-letters/redrive's body, as operators.ts parses it: `ids` or `filter`. */
const RedriveBody = z.union([
  z
    .strictObject({
      ids: z.array(z.int().min(1)).min(1).max(MAX_REDRIVE_IDS),
      rate,
    })
    .describe('These dead letters; an id that is no open dead letter is counted skipped'),
  z
    .strictObject({
      filter: z.strictObject({
        reason: text.optional(),
        recipient: text.optional(),
        channel: text.optional(),
        q: text.optional().describe("words of the message's payload text and kind, all required"),
      }),
      rate,
    })
    .describe('The open dead letters matching every given field ({} for all of them)'),
]);

const RedriveState = z.looseObject({
  redrive_id: z.string(),
  total: z.int().min(0).describe('the dead letters it took at its creation'),
  done: z.int().min(0).describe('put back to their recipients so far'),
  skipped: z.int().min(0).describe('pending again already (replayed or redriven): left alone'),
  state: z.enum(['running', 'done']),
  rate: z.int().min(1).describe('dead letters a second'),
  by: z.string().describe('the operator, `operator:<id>`'),
  created_at: time,
});

const AuditEntry = z.looseObject({
  seq: z.int().min(1),
  at: time,
  actor: z.string().describe('`operator:<id>`, the alerts_to agent, or `adapter`'),
  action: z.string().describe('`pause`, `resume`, `redrive`, `replay`, `message`, ...'),
  target: z.string().describe('the agent, redrive, dead letter or message acted on'),
  detail: z.record(z.string(), z.unknown()),
  prev_hash: z.string().describe("the entry before's `hash` (64 zeros for the first)"),
  hash: z.string().describe("SHA-256 of `prev_hash` and the entry's canonical JSON, hex"),
});

const limit = OPERATIONS.readChannel.query.find((q) => q.name === 'limit')!;
const textParam = (name: string, description: string): TextQueryParam => ({
  name,
  maxLength: MAX_TEXT,
  description: `${description} (at most ${MAX_TEXT} characters; empty: any)`,
});
/** GET /v1/messages and GET /v1/dead-letters: words of a message's payload text and its kind. */
const words = textParam(
  'q',
  "words of the message's payload text and its kind, all required, no stemming",
);
const cursor: QueryParam = {
  name: 'after',
  min: 0,
  max: Number.MAX_SAFE_INTEGER,
  default: 0,
  description: 'the `next_after` of the page before, an opaque cursor (0: from the start)',
};

/** Codes of the agent operations that only the sidecar answers (it has an outbox, and an upstream). */
const SIDECAR_ONLY = new Set<ErrorCode>(['adapter_unreachable', 'outbox_full']);

/**
 * The agent operations an operator may call too (routes.ts: `sender`, `reader`); every other one
 * is an agent's alone, and an operator's token gets 403 `not_an_agent` there (it has no inbox).
 */
const OPERATOR_MAY = new Set<OperationName>(['send', 'messageStatus', 'journey']);

/** An agent operation at the adapter: an agent's token, the sidecar's own codes left out. */
function shared(op: Operation): DocOperation {
  const errors = op.errors.filter((code) => !SIDECAR_ONLY.has(code));
  return {
    ...agentDocOperation(op),
    auth: true,
    errors: OPERATOR_MAY.has(op.name) ? errors : [...errors, 'not_an_agent'],
  };
}

const CHANNEL = 'A channel the agent is a member of, or `@<agent>` for its own direct messages.';
const STORE: readonly ErrorCode[] = ['overloaded', 'storage_error'];
const PAGED: readonly ErrorCode[] = ['invalid_request', 'too_many_reads', ...STORE];

const ROUTES: readonly DocOperation[] = [
  {
    method: 'GET',
    path: '/healthz',
    operationId: 'healthz',
    summary: 'Liveness',
    description: 'The process is up.',
    tag: 'operations',
    auth: false,
    responses: [{ status: 200, description: 'Up.', schema: status('ok') }],
    errors: [],
  },
  {
    method: 'GET',
    path: '/health',
    operationId: 'health',
    summary: 'Readiness',
    description:
      "200 once the store is open and its first sweep done; 503 before that, during shutdown, for good once the start's integrity check found a problem, and while writes keep failing on the storage. A storage bound reached (`storage_full`) leaves it as it is.",
    tag: 'operations',
    auth: false,
    responses: [{ status: 200, description: 'Ready.', schema: status('ready') }],
    errors: ['not_ready'],
  },
  {
    method: 'GET',
    path: '/metrics',
    operationId: 'metrics',
    summary: 'Prometheus metrics',
    description: "The adapter's metrics in Prometheus text format (version 0.0.4).",
    tag: 'operations',
    auth: false,
    responses: [
      { status: 200, description: 'The metrics.', schema: z.string(), contentType: 'text/plain' },
    ],
    errors: [],
  },
  {
    method: 'GET',
    path: '/openapi.json',
    operationId: 'openapi',
    summary: 'This document',
    description: "The adapter's HTTP API as an OpenAPI 3.1 document; no token needed.",
    tag: 'operations',
    auth: false,
    responses: [
      {
        status: 200,
        description: 'The document.',
        schema: z.looseObject({ openapi: z.string() }).describe('An OpenAPI 3.1 document'),
      },
    ],
    errors: [],
  },
  {
    method: 'GET',
    path: '/console',
    operationId: 'console',
    summary: "The operators' console",
    description:
      "The console's one HTML page (docs/operators.md): its script and styles come from /console/{file}, nothing from elsewhere (`Content-Security-Policy: default-src 'self'`), and it sets no cookie. The page needs no token; the operator's token, typed into its sign-in form, stays in the tab and goes as a bearer token to the JSON endpoints, which are all the page uses. 404 with AGW_CONSOLE=off.",
    tag: 'operators',
    auth: false,
    responses: [
      { status: 200, description: 'The page.', schema: z.string(), contentType: 'text/html' },
    ],
    errors: ['not_found'],
  },
  {
    method: 'GET',
    path: '/console/:file',
    operationId: 'consoleFile',
    summary: "A file of the console's page",
    description:
      "The console's styles (`console.css`) and script modules (`app.js` and those it imports), from the package, with the page's headers. 404 for any other name, and for all with AGW_CONSOLE=off.",
    tag: 'operators',
    auth: false,
    pathParams: { file: "The file's name: `console.css`, `app.js`, ..." },
    responses: [
      {
        status: 200,
        description: 'The file: styles as text/css, a script module as text/javascript.',
        schema: z.string(),
        contentType: ['text/css', 'text/javascript'],
      },
    ],
    errors: ['invalid_request', 'not_found'],
  },
  {
    ...shared(OPERATIONS.send),
    description:
      "Persists one message, then acknowledges it: 201 with the fields the adapter assigned; 200 with `duplicate` true for a repeat of a stored idempotency key (nothing new is stored). Refused with nothing stored otherwise. An operator's message has the sender `operator:<id>`, may go to any channel or agent, and in a thread is a continuation (hop 0), as the alerts_to agent's is.",
    body: Envelope,
    responses: [
      { status: 201, description: 'Stored.', schema: Ack },
      {
        status: 200,
        description: 'Stored before: a repeat of a stored idempotency key (`duplicate` true).',
        schema: Ack,
      },
    ],
  },
  {
    method: 'POST',
    path: '/v1/messages/batch',
    operationId: 'sendBatch',
    summary: 'Send messages in one request',
    description: `1 to ${MAX_BATCH} envelopes (an operator's too, as for POST /v1/messages), each answered as it would have been alone, in order; the accepted ones committed in one transaction. Past the send rate, the first envelope refused and every one after it are answered 429 \`rate_limited\`, so that a client sending the rest again keeps their order. 200 whenever the batch itself is well-formed.`,
    tag: 'messages',
    auth: true,
    body: z.object({ messages: z.array(Envelope).min(1).max(MAX_BATCH) }),
    responses: [
      {
        status: 200,
        description: "Each envelope's result, in order.",
        schema: z.looseObject({ results: z.array(BatchResult) }),
      },
    ],
    errors: ['invalid_json', 'invalid_request', 'storage_full', ...STORE],
  },
  {
    ...shared(OPERATIONS.readChannel),
    path: '/v1/channels/:name/messages',
    pathParams: { name: CHANNEL },
  },
  shared(OPERATIONS.inbox),
  { ...shared(OPERATIONS.inboxAcking), body: deliveryIdsSchema() },
  {
    ...shared(OPERATIONS.ack),
    description:
      'Done with these deliveries: never handed over again. Ids the agent does not hold (acked already, or another agent’s) are listed as unknown.',
    body: deliveryIdsSchema(),
  },
  { ...shared(OPERATIONS.nack), body: nackSchema() },
  {
    ...shared(OPERATIONS.extendLeases),
    description: `${OPERATIONS.extendLeases.description} The most \`extend_ms\` shown is AGW_MAX_LEASE_MS's default, ${DEFAULT_MAX_LEASE_MS} ms; the adapter's setting rules.`,
    body: leaseExtensionSchema(DEFAULT_MAX_LEASE_MS),
  },
  {
    ...shared(OPERATIONS.messageStatus),
    description:
      "For its sender, the alerts_to agent and operators: the message and each recipient's state, attempts and reason.",
  },
  {
    ...shared(OPERATIONS.journey),
    description:
      "For its sender, each recipient (its own copy), the alerts_to agent and operators: per recipient, where the copy is now (`cause`, one sentence naming agents and times; `paused` while an operator has paused the recipient), the recipient's last poll, the earlier message holding it back, and every event of its delivery. By message_id, or by the idempotency_key of one of the caller's own sends.",
  },
  {
    method: 'DELETE',
    path: '/v1/messages/:message_id',
    operationId: 'cancelScheduled',
    summary: 'Cancel a scheduled message',
    description:
      "For the sender of a message sent with `deliver_at` (an agent, or an operator), before it fires: it is never sent; an operator's and the alerts_to agent's cancel is in the audit log (`cancel`). Its idempotency key stays taken (a retry of the send answers 200 with the same message_id and schedules nothing), and GET /v1/messages/{message_id} shows `cancelled_at`. A repeated cancel answers 204 again. 409 `already_sent` once it has fired (it has its channel sequence), 403 `not_your_message` for another agent's message, 404 `not_found` for an unknown id.",
    tag: 'messages',
    auth: true,
    pathParams: { message_id: 'The message_id its 201 gave.' },
    responses: [{ status: 204, description: 'Cancelled: it will not be sent.' }],
    errors: ['not_found', 'not_your_message', 'already_sent', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/messages/:message_id/reply',
    operationId: 'takeReply',
    summary: "Take an ask's reply",
    description: `For the sender of the message (the sidecar's POST /v1/ask waits with this): the first copy, held by the caller, of a message whose \`reply_to\` is it. A pending copy is leased to the caller at once, ahead of the earlier messages of its channel, which wait behind it until it is acked or its lease ends; a leased one gets a whole lease again from now (same attempt, \`lease_extended\` in its journey); an acked or dead-lettered one is answered as it is, with its \`state\` and no lease. None yet: the request waits up to \`wait\` s, and the commit that stores the reply takes it for it; none by then: \`{"delivery": null}\`. A scheduled message of the caller's not sent yet has none. 404 \`not_found\` for a message the caller did not send.`,
    tag: 'deliveries',
    auth: true,
    pathParams: { message_id: 'The message_id of a message the caller sent.' },
    query: [
      {
        name: 'wait',
        min: 0,
        max: MAX_REPLY_WAIT_S,
        default: 0,
        description: `seconds to wait for the reply when there is none yet (0 to ${MAX_REPLY_WAIT_S})`,
      },
    ],
    responses: [
      {
        status: 200,
        description: 'The reply, taken; or null when none came within the wait.',
        schema: z.looseObject({ delivery: ReplyDeliverySchema.nullable() }),
      },
    ],
    errors: ['invalid_request', 'not_an_agent', 'not_found', 'too_many_polls', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/threads/:thread_id/messages',
    operationId: 'readThread',
    summary: "Read a thread's messages",
    description: `For the alerts_to agent and operators: every message of a thread, whatever its channel, in commit order (the operator's view of a conversation). Pass \`next_after\` back as \`after\` until a page comes back empty; a page ends early at AGW_MAX_PAGE_BYTES. An unknown thread is an empty page. At most ${PAGE_MAX_LIMIT} messages a page.`,
    tag: 'messages',
    auth: true,
    pathParams: { thread_id: "The thread's id: the message_id of its first message." },
    query: [cursor, limit],
    responses: [
      {
        status: 200,
        description: 'A page of the thread.',
        schema: z.looseObject({ messages: z.array(MessageSchema), next_after: nextAfter }),
      },
    ],
    errors: ['not_alerts_agent', ...PAGED],
  },
  shared(OPERATIONS.me),
  shared(OPERATIONS.heartbeat),
  {
    method: 'GET',
    path: '/v1/agents',
    operationId: 'agents',
    summary: "Every agent's state",
    description:
      'For the alerts_to agent and operators: each agent of the topology, in its order: its role, its last poll and last contact, its queue (pending, leased, critical), its open dead letters, whether it is stalled, and its pause.',
    tag: 'agents',
    auth: true,
    responses: [
      {
        status: 200,
        description: 'The agents.',
        schema: z.looseObject({ agents: z.array(AgentRow) }),
      },
    ],
    errors: ['not_alerts_agent', ...STORE],
  },
  {
    method: 'POST',
    path: '/v1/agents/:id/pause',
    operationId: 'pauseAgent',
    summary: 'Pause deliveries to an agent',
    description:
      "For operators: the agent's polls get no deliveries (they wait out their `wait`) until it is resumed; messages to it are still accepted and kept, within its bounds; leases already handed out run their course. Kept in the store: it survives restarts and holds on every replica. Pausing a paused agent changes nothing (`changed` false). In the audit log.",
    tag: 'agents',
    auth: true,
    pathParams: { id: "The agent's id in the topology." },
    responses: [{ status: 200, description: "The agent's pause.", schema: PauseAnswer }],
    errors: ['not_operator', 'invalid_request', 'unknown_agent', ...STORE],
  },
  {
    method: 'POST',
    path: '/v1/agents/:id/resume',
    operationId: 'resumeAgent',
    summary: 'Resume deliveries to an agent',
    description:
      "For operators: ends the agent's pause and wakes its parked polls (on every replica), which take what waited for it. Resuming an agent that is not paused changes nothing (`changed` false). In the audit log.",
    tag: 'agents',
    auth: true,
    pathParams: { id: "The agent's id in the topology." },
    responses: [{ status: 200, description: "The agent's pause, ended.", schema: PauseAnswer }],
    errors: ['not_operator', 'invalid_request', 'unknown_agent', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/channels',
    operationId: 'channels',
    summary: 'The channels',
    description:
      "For the alerts_to agent and operators: each group channel of the topology, in its order, with its members and its last sequence number (0: none yet). Agents' direct channels `@<id>` are not listed.",
    tag: 'operators',
    auth: true,
    responses: [
      {
        status: 200,
        description: 'The channels.',
        schema: z.looseObject({
          channels: z.array(
            z.looseObject({
              name: z.string(),
              members: z.array(z.string()),
              last_sequence: z.int().min(0),
            }),
          ),
        }),
      },
    ],
    errors: ['not_alerts_agent', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/messages',
    operationId: 'searchMessages',
    summary: 'Search the messages',
    description: `For operators: the retained messages matching every given parameter, newest first. \`q\` is full text over the payload's string values and the kind: its words (letters and digits), each required, no stemming, query syntax taken as text; SQLite indexes the first 4,096 characters of a message's text. Pass \`next_after\` back as \`after\` until a page comes back empty; a page ends early at AGW_MAX_PAGE_BYTES. At most ${PAGE_MAX_LIMIT} messages a page.`,
    tag: 'messages',
    auth: true,
    query: [
      words,
      textParam('channel', 'a channel, or `@<agent>`'),
      textParam('sender', 'an agent, or `operator:<id>`'),
      textParam('kind', 'a kind, exactly'),
      cursor,
      limit,
    ],
    responses: [
      {
        status: 200,
        description: 'A page of the messages found.',
        schema: z.looseObject({ messages: z.array(MessageSchema), next_after: nextAfter }),
      },
    ],
    errors: ['not_operator', ...PAGED],
  },
  {
    method: 'GET',
    path: '/v1/dead-letters',
    operationId: 'deadLetters',
    summary: 'The dead letters',
    description:
      'For the alerts_to agent and operators: the open deliveries that were given up (a replayed or redriven one leaves the list), oldest first, each with its reason and its message, matching every filter given. A page ends early at AGW_MAX_PAGE_BYTES; pass `next_after` back as `after`.',
    tag: 'dead-letters',
    auth: true,
    query: [
      ...OPERATIONS.outboxDeadLetters.query,
      textParam('reason', 'a dead-letter reason: `rejected`, `lease_expired`, ...'),
      textParam('recipient', 'the agent it was for'),
      textParam('channel', "its message's channel, or `@<agent>`"),
      words,
    ],
    responses: [
      {
        status: 200,
        description: 'A page of the dead letters.',
        schema: z.looseObject({ dead_letters: z.array(DeadLetter), next_after: nextAfter }),
      },
    ],
    errors: ['not_alerts_agent', ...PAGED],
  },
  {
    method: 'POST',
    path: '/v1/dead-letters/:id/replay',
    operationId: 'replayDeadLetter',
    summary: 'Replay a dead letter',
    description:
      'For the alerts_to agent and operators: a fresh delivery of the message to the same recipient, attempts reset; the dead letter leaves the list. Replaying it again creates nothing and answers the same delivery_id. In the audit log.',
    tag: 'dead-letters',
    auth: true,
    pathParams: { id: "The dead letter's id (digits)." },
    responses: [
      {
        status: 201,
        description: 'Replayed (`replayed` true).',
        schema: z.looseObject({ delivery_id: z.int().min(1), replayed: z.boolean() }),
      },
      {
        status: 200,
        description: 'Replayed before (`replayed` false): its delivery.',
        schema: z.looseObject({ delivery_id: z.int().min(1), replayed: z.boolean() }),
      },
    ],
    errors: ['not_alerts_agent', 'not_found', 'unknown_dead_letter', ...STORE],
  },
  {
    method: 'POST',
    path: '/v1/dead-letters/redrive',
    operationId: 'redriveDeadLetters',
    summary: 'Redrive dead letters in bulk',
    description: `For operators: puts back, at \`rate\` a second (default ${REDRIVE_RATE.default}), the dead letters named by \`ids\` (at most ${MAX_REDRIVE_IDS}) or the open ones matching \`filter\` when it is made (later ones are not part of it). Answered at once with its id and how many it took; it runs in steps, one commit each, and goes on after a restart. Each copy goes back to its recipient once and leaves the dead letters; one recipient's messages of a channel are handed over in sequence order whatever order they were selected in; one pending again already is skipped. Its progress: GET /v1/redrives/{id}. In the audit log.`,
    tag: 'dead-letters',
    auth: true,
    body: RedriveBody,
    responses: [
      {
        status: 202,
        description: 'Started.',
        schema: z.looseObject({
          redrive_id: z.string(),
          count: z.int().min(0).describe('the dead letters it takes (its `total`)'),
        }),
      },
    ],
    errors: ['not_operator', 'invalid_json', 'invalid_request', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/redrives/:id',
    operationId: 'redrive',
    summary: "A redrive's progress",
    description:
      'For operators: how many of its dead letters a redrive has put back and skipped, and whether it is done. 404 `not_found` for an unknown id.',
    tag: 'dead-letters',
    auth: true,
    pathParams: { id: 'The `redrive_id` its POST answered (`rd_` and hex digits).' },
    responses: [{ status: 200, description: 'Its progress.', schema: RedriveState }],
    errors: ['not_operator', 'invalid_request', 'not_found', ...STORE],
  },
  {
    method: 'GET',
    path: '/v1/audit',
    operationId: 'audit',
    summary: 'The audit log',
    description: `For operators: every act of an operator or of the alerts_to agent that changed something (pause, resume, redrive, replay, an operator's message), oldest first, each written in the commit of its act and hash-chained to the one before. Pass \`next_after\` (the last entry's \`seq\`) back as \`after\` until a page comes back empty. At most ${PAGE_MAX_LIMIT} entries a page.`,
    tag: 'operators',
    auth: true,
    query: [cursor, limit],
    responses: [
      {
        status: 200,
        description: 'A page of the audit log.',
        schema: z.looseObject({ entries: z.array(AuditEntry), next_after: nextAfter }),
      },
    ],
    errors: ['not_operator', 'invalid_request', ...STORE],
  },
];

/**
 * What every request to the adapter may be answered, beside an operation's own errors: a bug;
 * with a token, the adapter starting or stopping (and, by withEveryCallErrors, a POST that is
 * not JSON, a body past its bound).
 */
function withEveryCall(op: DocOperation): DocOperation {
  return withEveryCallErrors(
    op,
    op.auth ? ['internal', 'not_ready', 'shutting_down'] : ['internal'],
  );
}

let document: Record<string, unknown> | undefined;

/** The document, made at its first request: it never changes while the adapter runs. */
export function adapterOpenApiDocument(version: string): Record<string, unknown> {
  document ??= openApiDocument(
    {
      title: 'agent-gateway adapter',
      version,
      description:
        "The central adapter (docs/reference/adapter-api.md): it stores each message durably, fans it out to its channel's members, and hands each recipient its deliveries in order under a lease. Every /v1 endpoint takes a bearer token, an agent's or an operator's (docs/operators.md), and says whose; a POST with a body is `Content-Type: application/json`.",
      servers: [
        {
          url: 'http://agent-gateway-adapter:8080',
          description: "The adapter's Service in the Kubernetes manifests (k8s/base/adapter.yaml).",
        },
      ],
    },
    ROUTES.map(withEveryCall),
  );
  return document;
}
