/**
 * The sidecar's `POST /mcp` (CONTRACT.md): the MCP tools (mcp-tools.ts) over Streamable HTTP, on
 * the sidecar's own server and behind its request checks (request-checks.ts: Host, Origin,
 * Content-Type), which the SDK's handler does not make. The tools call the service directly.
 *
 * Stateless: each request gets a server and a transport of its own, closed with its response,
 * so nothing is kept between requests and any number of clients may call at once. No session
 * means no stream to GET and none to DELETE: the route table answers those 405. Answers are
 * plain JSON rather than an SSE stream: a tool call has exactly one answer and sends no
 * notifications.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  InitializeRequestSchema,
  JSONRPCRequestSchema,
  ListToolsRequestSchema,
  PingRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { sendJson } from '../protocol/http.js';
import { type McpOperations, type McpServerOptions, mcpServer } from './mcp-tools.js';

/** The requests this server answers, each with the SDK's schema of it. */
const REQUESTS = new Map<string, { safeParse(v: unknown): { success: boolean; error?: unknown } }>([
  ['initialize', InitializeRequestSchema],
  ['ping', PingRequestSchema],
  ['tools/list', ListToolsRequestSchema],
  ['tools/call', CallToolRequestSchema],
]);

/** The handler of POST /mcp: `body` is the request's JSON, already read and parsed. */
export type McpHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  body: unknown,
) => Promise<void>;

export function mcpEndpoint(ops: McpOperations, opts: McpServerOptions = {}): McpHandler {
  return async (req, res, body) => {
    const refused = refuseInvalidParams(body);
    if (refused !== undefined) {
      sendJson(res, 200, refused);
      return;
    }
    const server = mcpServer(ops, opts);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.once('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  };
}

/**
 * The answer to a frame holding a request whose params do not fit its method, or undefined. The
 * SDK parses params in its handler wrapper and answers a failure as -32603, an internal error
 * (SDK 1.32: `initialize` without `protocolVersion`, `tools/call` whose `name` is no string);
 * it is the caller's mistake, so it is answered -32602 here, before the SDK sees it. A batch
 * holding one is refused whole, each request answered, none run. A frame that is not a JSON-RPC
 * request, or a method this server does not answer, is left to the SDK, which answers well.
 */
function refuseInvalidParams(body: unknown): object | undefined {
  const requests = (Array.isArray(body) ? body : [body]).flatMap((m) => {
    const r = JSONRPCRequestSchema.safeParse(m);
    if (!r.success) return [];
    const valid = REQUESTS.get(r.data.method)?.safeParse(m).success !== false;
    return [{ id: r.data.id, method: r.data.method, valid }];
  });
  const bad = requests.find((r) => !r.valid);
  if (bad === undefined) return undefined;
  const answer = (r: (typeof requests)[number]) => ({
    jsonrpc: '2.0',
    id: r.id,
    error: {
      code: ErrorCode.InvalidParams,
      message: r.valid
        ? `refused with its batch: request ${bad.id} (${bad.method}) has invalid params`
        : `${r.method}: invalid params`,
    },
  });
  return Array.isArray(body) ? requests.map(answer) : answer(bad);
}
