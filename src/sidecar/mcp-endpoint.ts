/**
 * The sidecar's `POST /mcp` (docs/reference/sidecar.md, "MCP: POST /mcp"): the MCP tools
 * (mcp-tools.ts) over Streamable HTTP, on the sidecar's own server and behind its request checks
 * (request-checks.ts: Host, Origin, Content-Type), which the SDK's handler does not make. The
 * tools call the service directly.
 *
 * Both protocol eras, on the SDK's v2 server (docs/reference/mcp.md, "Protocol versions"):
 * - a request of MCP 2026-07-28 (its version in `params._meta`, no `initialize`) goes to the
 *   SDK's `createMcpHandler`, which serves that era from a server made for the request;
 * - a request of the 2025 era (2025-11-25, 2025-06-18, 2025-03-26 and earlier: no such `_meta`)
 *   is served as it always was, by a server and the SDK's Streamable HTTP transport of its own,
 *   stateless, answered as plain JSON, and a missing resource answered -32002 as those versions
 *   have it (mcp-resources.ts). Not by createMcpHandler's own fallback for that era, which
 *   answers as an SSE stream.
 * The SDK's `isLegacyRequest` tells them apart, as createMcpHandler itself does.
 *
 * Stateless: each request gets a server and a transport of its own, closed with its response,
 * so nothing is kept between requests and any number of clients may call at once. No session
 * means no stream to GET and none to DELETE: the route table answers those 405. Answers are
 * plain JSON rather than an SSE stream: a tool call has exactly one answer and sends no
 * notifications.
 *
 * A body larger than MCP_MAX_BODY_BYTES is answered in MCP's terms rather than with a bare 413
 * (which an MCP client shows as an opaque transport failure): a `tools/call` gets a tool result
 * with `isError` and `payload_too_large`, as `agent-gateway mcp` answers one (the sidecar's 413
 * passed on); another request a JSON-RPC error with its id; one whose id cannot be read an HTTP
 * 413 whose body is a JSON-RPC error without one. This needs the route to leave the body to the
 * endpoint (routes.ts, no `body`); a body the route read already is taken as it is.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import {
  createMcpHandler,
  isLegacyRequest,
  type JSONRPCMessage,
  ProtocolErrorCode,
  SUPPORTED_PROTOCOL_VERSIONS,
  type TransportSendOptions,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import type { AgentApi } from '../protocol/agent-api.js';
import { GatewayError } from '../protocol/errors.js';
import { parseJson, sendJson } from '../protocol/http.js';
import { DEFAULT_MAX_MESSAGE_BYTES } from '../protocol/limits.js';
import { resourceNotFoundOf2025 } from './mcp-resources.js';
import { type McpServerOptions, mcpServer, refuseInvalidParams, toolError } from './mcp-tools.js';

/**
 * The largest body /mcp takes: a message at the adapter's default bound (AGW_MAX_MESSAGE_BYTES,
 * 256 KiB) and 16 KiB for the JSON-RPC around its arguments, 272 KiB in all.
 */
export const MCP_MAX_BODY_BYTES = DEFAULT_MAX_MESSAGE_BYTES + 16_384;

/**
 * How much of a larger body is read (and dropped) to answer it: 16 MiB, 60 times the bound, a
 * few milliseconds on loopback. Past it the answer goes out unread and the connection closes.
 */
const MAX_DRAINED_BYTES = 16 * 1024 * 1024;

/** How much of each end of a larger body is kept to find its request's id and method. */
const EDGE_BYTES = 4096;

/**
 * The handler of POST /mcp: `body` is the request's JSON when the route read it, or undefined
 * when it left the body to the endpoint.
 */
export type McpHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  body: unknown,
) => Promise<void>;

export function mcpEndpoint(api: AgentApi, opts: McpServerOptions = {}): McpHandler {
  const server = () => mcpServer(api, opts);
  // the 2026-07-28 era; `legacy: 'reject'`, since the 2025 era never reaches it (serve2025)
  const modern = createMcpHandler(server, { legacy: 'reject' });
  return async (req, res, given) => {
    let body = given;
    let bytes: Buffer | undefined;
    if (body === undefined) {
      const read = await readMcpBody(req);
      if ('over' in read) {
        answerTooLarge(res, read.over, req.headers['mcp-protocol-version']);
        return;
      }
      bytes = read.body;
      body = parseJson(bytes);
    }
    const refused = refuseInvalidParams(body);
    if (refused !== undefined) {
      sendJson(res, 200, refused);
      return;
    }
    // the request's end, answered or given up by the client: the exchange ends with it, and a
    // tool call still running is aborted (a fetch_inbox's poll given up at the adapter too)
    const ended = new AbortController();
    res.once('close', () => ended.abort());
    const request = webRequest(req, bytes ?? JSON.stringify(body), ended.signal);
    const response = (await isLegacyRequest(request, body))
      ? await serve2025(server(), request, body, ended.signal)
      : await modern.fetch(request, { parsedBody: body });
    await answer(res, response);
  };
}

/**
 * The SDK's Streamable HTTP transport, stateless and answering JSON, for a request of the 2025
 * era: what this endpoint ran on with SDK 1.x, with that era's code for a missing resource.
 */
class Transport2025 extends WebStandardStreamableHTTPServerTransport {
  constructor() {
    super({ sessionIdGenerator: undefined, enableJsonResponse: true });
  }

  override send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    return super.send(resourceNotFoundOf2025(message), options);
  }
}

/** Serves a request of the 2025 era on `server` and a transport of its own, ended with `ended`. */
async function serve2025(
  server: ReturnType<typeof mcpServer>,
  request: Request,
  body: unknown,
  ended: AbortSignal,
): Promise<Response> {
  const transport = new Transport2025();
  ended.addEventListener(
    'abort',
    () => {
      void transport.close();
      void server.close();
    },
    { once: true },
  );
  await server.connect(transport);
  return transport.handleRequest(request, { parsedBody: body });
}

/** Headers of the connection, not of the request: a Request carries none of them. */
const HOP_BY_HOP = new Set([
  'connection',
  'content-length',
  'host',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
]);

/** The request as the SDK's web-standard handlers take it, its body already read. */
function webRequest(req: IncomingMessage, body: Buffer | string, signal: AbortSignal): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue;
    headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  // the Host was checked (request-checks.ts) and names this sidecar: the URL's host is no input
  return new Request(new URL(req.url ?? '/mcp', 'http://localhost'), {
    method: req.method ?? 'POST',
    headers,
    body,
    signal,
  });
}

/** Writes the SDK's response: JSON as one body, an SSE stream as it comes. */
async function answer(res: ServerResponse, response: Response): Promise<void> {
  if (res.destroyed) return; // given up: nobody to answer (the SDK's 499)
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  if (response.body === null) {
    res.writeHead(response.status, headers).end();
  } else if (!/^text\/event-stream\b/i.test(headers['content-type'] ?? '')) {
    const text = Buffer.from(await response.arrayBuffer());
    res.writeHead(response.status, { ...headers, 'content-length': text.length }).end(text);
  } else {
    res.writeHead(response.status, headers);
    await pipeline(Readable.fromWeb(response.body as WebReadableStream), res).catch(() => {
      // the client went away mid-stream: nothing more to write
    });
  }
}

/** A body past MCP_MAX_BODY_BYTES: its size, and its two ends. */
interface Oversized {
  /** Its size: as read, or as Content-Length declared it when that was past the drain. */
  readonly bytes: number;
  readonly head: string;
  readonly tail: string;
  /** All of it was read: the connection may serve another request. */
  readonly drained: boolean;
}

/** Reads the body: whole within the bound, else only its ends, up to MAX_DRAINED_BYTES. */
function readMcpBody(req: IncomingMessage): Promise<{ body: Buffer } | { over: Oversized }> {
  const declared = Number(req.headers['content-length']);
  if (declared > MAX_DRAINED_BYTES) {
    return Promise.resolve({ over: { bytes: declared, head: '', tail: '', drained: false } });
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let head: Buffer | undefined;
    let tail = Buffer.alloc(0);
    const over = (drained: boolean): { over: Oversized } => ({
      over: {
        bytes: size,
        head: head?.toString('utf8') ?? '',
        tail: tail.toString('utf8'),
        drained,
      },
    });
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (head === undefined && size <= MCP_MAX_BODY_BYTES) {
        chunks.push(chunk);
        return;
      }
      if (head === undefined) {
        const all = Buffer.concat([...chunks, chunk]);
        chunks.length = 0;
        head = Buffer.from(all.subarray(0, EDGE_BYTES));
        tail = Buffer.from(all.subarray(-EDGE_BYTES));
      } else {
        tail = Buffer.from(Buffer.concat([tail, chunk]).subarray(-EDGE_BYTES));
      }
      if (size > MAX_DRAINED_BYTES) {
        req.off('data', onData);
        req.pause();
        resolve(over(false));
      }
    };
    req.on('data', onData);
    req.once('end', () =>
      resolve(head === undefined ? { body: Buffer.concat(chunks, size) } : over(true)),
    );
    req.once('error', reject);
  });
}

/** The answer to a body past the bound: in MCP's terms where its request can be told. */
function answerTooLarge(res: ServerResponse, over: Oversized, version: unknown): void {
  const err = new GatewayError(
    'payload_too_large',
    `the request body (${over.drained ? '' : 'at least '}${over.bytes} bytes) is larger than the ${MCP_MAX_BODY_BYTES} bytes /mcp takes: a message of at most ${DEFAULT_MAX_MESSAGE_BYTES} bytes and the JSON-RPC around it; send less, or put the bulk where the recipient can fetch it and send a reference`,
  );
  // unread bytes stay on the connection: it cannot carry another request
  if (!over.drained) res.setHeader('connection', 'close');
  const { id, method } = frameOf(over.head, over.tail);
  const error = {
    code: ProtocolErrorCode.InvalidRequest,
    message: `payload_too_large: ${err.message}`,
    data: { ...err.toJSON(), limit_bytes: MCP_MAX_BODY_BYTES },
  };
  if (id === undefined) {
    // no request to answer: the HTTP status says it, and MCP's error response without an id
    sendJson(res, 413, { jsonrpc: '2.0', error });
  } else if (method === 'tools/call') {
    // MCP 2026-07-28 and later mark a result as whole (their clients refuse one that is not);
    // their requests name their version in this header, those of the 2025 era one of theirs
    const modern = typeof version === 'string' && !SUPPORTED_PROTOCOL_VERSIONS.includes(version);
    const result = {
      ...toolError(err, { limit_bytes: MCP_MAX_BODY_BYTES }),
      ...(modern ? { resultType: 'complete' } : {}),
    };
    sendJson(res, 200, { jsonrpc: '2.0', id, result } satisfies JSONRPCMessage);
  } else {
    sendJson(res, 200, { jsonrpc: '2.0', id, error } satisfies JSONRPCMessage);
  }
}

/**
 * The `id` and `method` of a JSON-RPC request from the two ends of its text, where they are
 * found: members of the top-level object that come before its first object or array (the head:
 * `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{...` as the Python SDK writes it), or
 * after its last one (the tail: `...},"jsonrpc":"2.0","id":7}` as the TypeScript SDK writes it).
 * Neither end is ever read as more than plain scalar members: one that is not is left out.
 */
export function frameOf(head: string, tail: string): { id?: string | number; method?: string } {
  const found = { ...membersAtEnd(tail), ...membersAtStart(head) };
  const { id, method } = found;
  return {
    ...(typeof id === 'number' || typeof id === 'string' ? { id } : {}),
    ...(typeof method === 'string' ? { method } : {}),
  };
}

const SCALAR = String.raw`(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)`;
const MEMBER = String.raw`"(?:[^"\\]|\\.)*"\s*:\s*${SCALAR}`;
// a member of the head counts only when what follows it is there too: one cut at the edge does not
const AT_START = new RegExp(String.raw`^\s*\{\s*(${MEMBER}(?:\s*,\s*${MEMBER})*)(?=\s*[,}])`);
const AT_END = new RegExp(String.raw`(?:^\s*\{|,)\s*(${MEMBER}(?:\s*,\s*${MEMBER})*)\s*\}\s*$`);
const ONE = new RegExp(String.raw`("(?:[^"\\]|\\.)*")\s*:\s*(${SCALAR})`, 'g');

function membersAtStart(text: string): Record<string, unknown> {
  return members(AT_START.exec(text)?.[1]);
}

function membersAtEnd(text: string): Record<string, unknown> {
  return members(AT_END.exec(text)?.[1]);
}

function members(list: string | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [, key, value] of (list ?? '').matchAll(ONE)) {
    try {
      out[JSON.parse(key!) as string] = JSON.parse(value!);
    } catch {} // a string cut at the edge: not a member
  }
  return out;
}
