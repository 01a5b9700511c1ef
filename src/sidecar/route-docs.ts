/**
 * The sidecar's OpenAPI document (GET /openapi.json): the agent's operations as agent-api.ts
 * declares them, and the sidecar's own endpoints of routes.ts (probes, metrics, MCP, this
 * document). test/protocol/openapi-documents-lint.test.ts holds it to the route table.
 */
import { z } from 'zod';
import { ErrorBodySchema } from '../protocol/agent-schemas.js';
import {
  agentDocOperations,
  type DocOperation,
  openApiDocument,
  withEveryCallErrors,
} from '../protocol/openapi.js';

const status = (value: string) => z.looseObject({ status: z.literal(value) });

/** A JSON-RPC 2.0 message (MCP): loose, the MCP schema says the rest. */
const JsonRpcMessage = z
  .looseObject({
    jsonrpc: z.literal('2.0'),
    id: z.union([z.string(), z.int()]).optional().describe('absent for a notification'),
    method: z.string().optional().describe('a request or notification: tools/call, say'),
    params: z.record(z.string(), z.unknown()).optional(),
    result: z.unknown().optional(),
    error: z.looseObject({ code: z.int(), message: z.string() }).optional(),
  })
  .describe('A JSON-RPC 2.0 message (MCP)');

const JsonRpcError = z
  .looseObject({
    jsonrpc: z.literal('2.0'),
    id: z.union([z.string(), z.int()]).nullable(),
    error: z.looseObject({ code: z.int(), message: z.string() }),
  })
  .describe('A JSON-RPC 2.0 error');

/** The sidecar's own endpoints, beside the agent's operations. */
const LOCAL: readonly DocOperation[] = [
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
    path: '/readyz',
    operationId: 'readyz',
    summary: 'Readiness',
    description:
      "200 once the adapter's /health has answered 200 since start (the start gate); it stays 200 after, because the outbox covers the adapter's outages.",
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
    description: "The sidecar's metrics in Prometheus text format (version 0.0.4).",
    tag: 'operations',
    auth: false,
    responses: [
      {
        status: 200,
        description: 'The metrics.',
        schema: z.string(),
        contentType: 'text/plain',
      },
    ],
    errors: [],
  },
  {
    method: 'POST',
    path: '/mcp',
    operationId: 'mcp',
    summary: 'MCP (Streamable HTTP)',
    description:
      "The agent's operations as MCP tools (docs/reference/mcp.md), over MCP's Streamable HTTP transport, stateless: each request stands alone, no session is kept, and there is no stream to GET or DELETE. The client must accept both application/json and text/event-stream; answers are JSON.",
    tag: 'mcp',
    auth: false,
    body: z.union([JsonRpcMessage, z.array(JsonRpcMessage).min(1)]),
    responses: [
      {
        status: 200,
        description: 'The JSON-RPC answer (a tool result, or a JSON-RPC error).',
        schema: z.union([JsonRpcMessage, z.array(JsonRpcMessage)]),
      },
      { status: 202, description: 'Accepted: the body held only notifications or answers.' },
      {
        status: 400,
        description:
          'The body is not JSON (`invalid_json`, docs/reference/errors.md), or it is JSON but no JSON-RPC message (a JSON-RPC error).',
        schema: z.union([ErrorBodySchema, JsonRpcError]),
      },
      {
        status: 406,
        description: 'The request does not accept both application/json and text/event-stream.',
        schema: JsonRpcError,
      },
    ],
    errors: ['shutting_down'],
  },
  {
    method: 'GET',
    path: '/openapi.json',
    operationId: 'openapi',
    summary: 'This document',
    description: "The sidecar's HTTP API as an OpenAPI 3.1 document.",
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
];

/**
 * What every request to the sidecar may be answered, beside an operation's own errors: its
 * request checks (request-checks.ts: a Host or Origin not its own; a POST that is not JSON),
 * a body past its bound, and a bug.
 */
function withEveryCall(op: DocOperation): DocOperation {
  return withEveryCallErrors(op, ['bad_host', 'cross_origin', 'internal']);
}

let document: Record<string, unknown> | undefined;

/** The document, made at its first request: it never changes while the sidecar runs. */
export function sidecarOpenApiDocument(version: string): Record<string, unknown> {
  document ??= openApiDocument(
    {
      title: 'agent-gateway sidecar',
      version,
      description:
        "The per-pod gateway an agent runtime calls on loopback (docs/reference/sidecar.md). No token: the pod is the trust boundary; requests must come from a local runtime (Host, Origin and Sec-Fetch-Site are checked) and every POST is `Content-Type: application/json`. Sends the adapter does not answer are kept in an outbox and delivered later; the agent's own negative delivery ids (replayed copies) are accepted beside the adapter's.",
      servers: [
        {
          url: 'http://127.0.0.1:7070',
          description: "The sidecar at its default AGW_LISTEN, in the agent's pod.",
        },
      ],
    },
    [...agentDocOperations(), ...LOCAL].map(withEveryCall),
  );
  return document;
}
