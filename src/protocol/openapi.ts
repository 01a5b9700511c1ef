/**
 * The OpenAPI 3.1 documents both programs serve at GET /openapi.json (docs/reference/operations.md), rendered
 * from what is declared elsewhere: each endpoint's method, path, who may call it, its query,
 * body and answers (zod schemas, as JSON Schema 2020-12, the dialect of OpenAPI 3.1) and the
 * catalogue's errors it may answer, grouped by status. The agent's operations come from
 * agent-api.ts; each program's route-docs.ts adds its own endpoints and differences.
 * test/protocol/openapi-documents-lint.test.ts lints both documents with Redocly and holds
 * them to the route tables, so a document cannot drift from what is served.
 */
import { STATUS_CODES } from 'node:http';
import type { z } from 'zod';
import {
  OPERATION_LIST,
  type Operation,
  type OperationName,
  pathParams,
  type QueryParam,
} from './agent-api.js';
import { BODIES, ErrorBodySchema, jsonSchemaOf, OUTPUTS } from './agent-schemas.js';
import { ERRORS, type ErrorCode } from './errors.js';

/** The documents' tags, each with what a reader finds under it; every endpoint has one. */
export const TAGS = {
  messages: 'Sending messages, reading channels and threads, and what became of a message.',
  deliveries:
    'Receiving messages as deliveries leased to the caller, and acking, nacking or extending them.',
  agents:
    "Who the caller is, that it is alive, and (alerts_to, operators) every agent's state, paused and resumed.",
  'dead-letters': 'Messages that could not be delivered or stored, kept to be seen and replayed.',
  emergencies: 'Alerts to the operators outside the message path.',
  mcp: "The agent's operations as MCP tools.",
  operations: 'Probes, metrics, state and this document: for the platform, not for agents.',
  operators: 'For the people who run the deployment: the console, the channels, the audit log.',
} as const;

export type Tag = keyof typeof TAGS;

/** One answer of an operation: a 2xx, or an answer that is not one of the catalogue's errors. */
export interface DocResponse {
  readonly status: number;
  readonly description: string;
  /** Its body; none for an empty answer. */
  readonly schema?: z.ZodType;
  /** Default application/json; several when the same answer comes in one of them. */
  readonly contentType?: string | readonly string[];
}

/** A text query parameter (a filter, a search): any string of at most `maxLength` characters. */
export interface TextQueryParam {
  readonly name: string;
  readonly maxLength: number;
  readonly description: string;
}

export interface DocOperation {
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** The router's form, with :params: `/v1/messages/:message_id`. */
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly description: string;
  readonly tag: Tag;
  /** A bearer token is required (a 401 `unauthorized` is documented with it). */
  readonly auth: boolean;
  /** Each :param of the path, by name: its description (its schema is a string). */
  readonly pathParams?: Readonly<Record<string, string>>;
  readonly query?: readonly (QueryParam | TextQueryParam)[];
  /** The JSON request body. */
  readonly body?: z.ZodType;
  /** Default true when there is a body. */
  readonly bodyRequired?: boolean;
  readonly responses: readonly DocResponse[];
  /** The catalogue's codes it may answer: each documented under its status. */
  readonly errors: readonly ErrorCode[];
}

export interface DocInfo {
  readonly title: string;
  /** The package's version. */
  readonly version: string;
  readonly description: string;
  readonly servers: readonly { readonly url: string; readonly description: string }[];
}

type Json = Record<string, unknown>;

const ERROR_REF = { $ref: '#/components/schemas/Error' };
/**
 * Every operation of both programs may be answered 408 by Node itself, before any route runs:
 * the server shell (http-server.ts) holds each request's headers to AGW_HEADERS_TIMEOUT_MS and
 * the whole request to AGW_REQUEST_TIMEOUT_MS (configuration.md). The adapter's probes answer
 * no other 4xx.
 */
const REQUEST_TIMEOUT = 'RequestTimeout';
const RETRY_AFTER = 'Retry-After';
/** The statuses that carry Retry-After (errors.md). */
const RETRYING = new Set([429, 503]);

/** The document of these operations, in their order. */
export function openApiDocument(info: DocInfo, ops: readonly DocOperation[]): Json {
  const schemas: Json = {
    Error: jsonSchemaOf(ErrorBodySchema, { target: 'draft-2020-12', io: 'output' }),
  };
  const paths: Record<string, Json> = {};
  for (const op of ops) {
    const path = op.path.replace(/:([a-z_]+)/g, '{$1}');
    const item = paths[path] ?? {};
    paths[path] = item;
    const method = op.method.toLowerCase();
    if (item[method] !== undefined) throw new Error(`${op.method} ${op.path} is declared twice`);
    item[method] = operation(op, schemas);
  }
  const used = new Set(ops.map((op) => op.tag));
  const bearer = ops.some((op) => op.auth);
  const retrying = ops.some((op) => op.errors.some((code) => RETRYING.has(ERRORS[code].status)));
  return {
    openapi: '3.1.0',
    info: {
      title: info.title,
      version: info.version,
      description: info.description,
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: info.servers,
    tags: Object.entries(TAGS)
      .filter(([name]) => used.has(name as Tag))
      .map(([name, description]) => ({ name, description })),
    paths,
    components: {
      schemas,
      responses: {
        [REQUEST_TIMEOUT]: {
          description:
            'Request Timeout: the headers did not arrive within AGW_HEADERS_TIMEOUT_MS, or the whole request within AGW_REQUEST_TIMEOUT_MS; sent by Node with no body, and the connection closed.',
        },
      },
      ...(retrying
        ? {
            headers: {
              [RETRY_AFTER]: {
                description: 'Seconds to wait before trying the same request again.',
                schema: { type: 'integer', minimum: 0 },
              },
            },
          }
        : {}),
      ...(bearer
        ? {
            securitySchemes: {
              bearer: {
                type: 'http',
                scheme: 'bearer',
                description:
                  "An agent's or an operator's token (the topology keeps its SHA-256): it decides who the caller is.",
              },
            },
          }
        : {}),
    },
  };
}

function operation(op: DocOperation, schemas: Json): Json {
  const named = Object.keys(op.pathParams ?? {});
  if (named.join() !== pathParams(op.path).join()) {
    throw new Error(`${op.method} ${op.path}: its path parameters are described as ${named}`);
  }
  const parameters = [
    ...Object.entries(op.pathParams ?? {}).map(([name, description]) => ({
      name,
      in: 'path',
      required: true,
      description,
      schema: { type: 'string' },
    })),
    ...(op.query ?? []).map((q) => ({
      name: q.name,
      in: 'query',
      required: false,
      description: q.description,
      schema:
        'maxLength' in q
          ? { type: 'string', maxLength: q.maxLength }
          : { type: 'integer', minimum: q.min, maximum: q.max, default: q.default },
    })),
  ];
  const responses: Json = {};
  for (const r of op.responses) {
    const { schema } = r;
    responses[r.status] = {
      description: r.description,
      ...(schema === undefined
        ? {}
        : {
            content: Object.fromEntries(
              [r.contentType ?? 'application/json']
                .flat()
                .map((type) => [
                  type,
                  { schema: placed(schema, 'output', `${op.operationId}.${r.status}`, schemas) },
                ]),
            ),
          }),
    };
  }
  responses[408] = { $ref: `#/components/responses/${REQUEST_TIMEOUT}` };
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set<ErrorCode>(op.auth ? ['unauthorized', ...op.errors] : op.errors)) {
    const status = ERRORS[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  for (const [status, codes] of byStatus) {
    // one answer per status: an error of the catalogue there would contradict the schema given
    if (responses[status] !== undefined) {
      throw new Error(`${op.method} ${op.path}: ${status} is both an answer and ${codes}`);
    }
    responses[status] = {
      description: `${STATUS_CODES[status] ?? 'Error'}: ${codes.map((c) => `\`${c}\``).join(', ')} (docs/reference/errors.md).`,
      ...(RETRYING.has(status)
        ? { headers: { [RETRY_AFTER]: { $ref: `#/components/headers/${RETRY_AFTER}` } } }
        : {}),
      content: { 'application/json': { schema: ERROR_REF } },
    };
  }
  return {
    operationId: op.operationId,
    summary: op.summary,
    description: op.description,
    tags: [op.tag],
    // [] says "no token": without it, an operation falls back to the document's default
    security: op.auth ? [{ bearer: [] }] : [],
    ...(parameters.length === 0 ? {} : { parameters }),
    ...(op.body === undefined
      ? {}
      : {
          requestBody: {
            required: op.bodyRequired ?? true,
            content: {
              'application/json': {
                schema: placed(op.body, 'input', `${op.operationId}.body`, schemas),
              },
            },
          },
        }),
    responses,
  };
}

/**
 * A zod schema as JSON Schema inside the document. zod writes a schema that recurs (or one
 * reused under an id) into `$defs`, referred to as `#/$defs/<key>`, and a recursive root as
 * `#`: in an OpenAPI document those refs resolve against the whole document, not the schema.
 * So each definition moves into components/schemas as `<name>.<key>`, the root too (as
 * `<name>`) when something refers to it, and every ref follows.
 */
function placed(schema: z.ZodType, io: 'input' | 'output', name: string, schemas: Json): Json {
  const { $defs, definitions, ...root } = jsonSchemaOf(schema, { target: 'draft-2020-12', io });
  let recursive = false;
  const target = (ref: string): string => {
    if (ref === '#') {
      recursive = true;
      return `#/components/schemas/${name}`;
    }
    const def = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(ref);
    if (def !== null) return `#/components/schemas/${name}.${def[1]}`;
    if (ref.startsWith('#')) throw new Error(`${name}: a $ref zod was not known to write: ${ref}`);
    return ref;
  };
  const rewrite = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rewrite);
    if (typeof v !== 'object' || v === null) return v;
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => [
        k,
        k === '$ref' && typeof x === 'string' ? target(x) : rewrite(x),
      ]),
    );
  };
  for (const [key, def] of Object.entries({ ...(definitions as Json), ...($defs as Json) })) {
    schemas[`${name}.${key}`] = rewrite(def);
  }
  const out = rewrite(root) as Json;
  if (!recursive) return out;
  schemas[name] = out;
  return { $ref: `#/components/schemas/${name}` };
}

// ---- the agent's operations (agent-api.ts) as the sidecar serves them ----

const AGENT_TAGS: { readonly [N in OperationName]: Tag } = {
  send: 'messages',
  inbox: 'deliveries',
  inboxAcking: 'deliveries',
  ack: 'deliveries',
  nack: 'deliveries',
  extendLeases: 'deliveries',
  messageStatus: 'messages',
  journey: 'messages',
  me: 'agents',
  heartbeat: 'agents',
  readChannel: 'messages',
  emergency: 'emergencies',
  status: 'operations',
  outboxDeadLetters: 'dead-letters',
  ask: 'messages',
  awaitReply: 'messages',
};

/** The agent operations' path parameters, by name. */
const PATH_PARAMS: Readonly<Record<string, string>> = {
  message_id:
    "The message_id (a UUIDv7) its send answered; for a journey and an ask's wait, also the idempotency_key of one of the caller's own sends.",
  channel: 'A channel the agent is a member of, or `@<agent>` for its own direct messages.',
};

function describe(param: string): string {
  const text = PATH_PARAMS[param];
  if (text === undefined) throw new Error(`the path parameter :${param} has no description`);
  return text;
}

/** 2xx answers that say more than their status's name. */
const ANSWERS: { readonly [N in OperationName]?: Readonly<Record<number, string>> } = {
  send: {
    201: 'Delivered (`status` delivered): stored by the adapter.',
    200: 'Delivered before (`status` delivered, `duplicate` true): a repeat of a stored idempotency key.',
    202: 'Queued (`status` queued): kept in the outbox while the adapter does not answer, delivered later.',
  },
  emergency: { 202: 'Written: one priority=CRIT journald entry.' },
  ask: {
    200: 'The reply (`status` replied), or, when the time ran out, where the message is (`status` timeout).',
  },
  awaitReply: {
    200: 'The reply (`status` replied), or, when the time ran out, where the message is (`status` timeout).',
  },
};

/**
 * An agent operation as the sidecar serves it: no token (the pod is the trust boundary), its
 * own negative delivery ids allowed, the bodies' and answers' schemas of agent-schemas.ts. An
 * `agent` operation stops taking requests while the sidecar stops (503 `shutting_down`).
 */
export function agentDocOperation(op: Operation): DocOperation {
  const body = op.body === true ? BODIES[op.name]?.schema : undefined;
  const params = pathParams(op.path);
  return {
    method: op.method,
    path: op.path,
    operationId: op.name,
    summary: op.summary,
    description: op.description,
    tag: AGENT_TAGS[op.name],
    auth: false,
    ...(params.length === 0
      ? {}
      : { pathParams: Object.fromEntries(params.map((p) => [p, describe(p)])) }),
    ...(op.query === undefined ? {} : { query: op.query }),
    ...(body === undefined ? {} : { body }),
    responses: op.statuses.map((status) => ({
      status,
      description: ANSWERS[op.name]?.[status] ?? `${STATUS_CODES[status]}.`,
      schema: OUTPUTS[op.name],
    })),
    errors: op.who === 'agent' ? [...op.errors, 'shutting_down'] : op.errors,
  };
}

/** The agent operations (agent-api.ts), in their declared order, as the sidecar serves them. */
export function agentDocOperations(): DocOperation[] {
  return OPERATION_LIST.map(agentDocOperation);
}

/**
 * An operation with the errors every call of its program may get beside its own: `more` (the
 * program's: its request checks, a bug), and 415 `not_json` for a POST, 413 `payload_too_large`
 * for one with a body.
 */
export function withEveryCallErrors(op: DocOperation, more: readonly ErrorCode[]): DocOperation {
  const all = [...op.errors, ...more];
  if (op.method === 'POST') all.push('not_json');
  if (op.body !== undefined) all.push('payload_too_large');
  return { ...op, errors: [...new Set(all)] };
}
