/**
 * The sidecar's `POST /mcp` (docs/reference/sidecar.md, "MCP: POST /mcp"): the MCP tools
 * (mcp-tools.ts) over Streamable HTTP, on the sidecar's own server and behind its request checks
 * (request-checks.ts: Host, Origin, Content-Type), which the SDK's handler does not make. The
 * tools call the service directly.
 *
 * Stateless: each request gets a server and a transport of its own, closed with its response,
 * so nothing is kept between requests and any number of clients may call at once. No session
 * means no stream to GET and none to DELETE: the route table answers those 405. Answers are
 * plain JSON rather than an SSE stream: a tool call has exactly one answer and sends no
 * notifications.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AgentApi } from '../protocol/agent-api.js';
import { sendJson } from '../protocol/http.js';
import { type McpServerOptions, mcpServer, refuseInvalidParams } from './mcp-tools.js';

/** The handler of POST /mcp: `body` is the request's JSON, already read and parsed. */
export type McpHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  body: unknown,
) => Promise<void>;

export function mcpEndpoint(api: AgentApi, opts: McpServerOptions = {}): McpHandler {
  return async (req, res, body) => {
    const refused = refuseInvalidParams(body);
    if (refused !== undefined) {
      sendJson(res, 200, refused);
      return;
    }
    const server = mcpServer(api, opts);
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
