/**
 * The MCP resources (docs/reference/mcp.md, "Resources"): the agent's channels and their members,
 * for clients that discover before they act. `agw://channels` lists them all and
 * `agw://channels/{name}` one, each read from the `me` operation (GET /v1/me) when asked, on
 * either door: the sidecar's service, or `agent-gateway mcp`'s HTTP. No subscriptions: the
 * server is stateless, and the topology changes only with a restart of the adapter.
 */
import {
  type JSONRPCMessage,
  ProtocolError,
  ProtocolErrorCode,
  type ReadResourceResult,
  type Resource,
  type ResourceTemplateType,
  type Server,
} from '@modelcontextprotocol/server';
import {
  type AgentApi,
  type CallOptions,
  JsonText,
  type Me,
  pathSegment,
} from '../protocol/agent-api.js';
import { isGatewayError } from '../protocol/errors.js';

/** Registers resources/list, resources/templates/list and resources/read on `server`. */
export function serveResources(server: Server, api: AgentApi): void {
  server.setRequestHandler('resources/list', (_, ctx) =>
    refusalAsError(listResources(api, { signal: ctx.mcpReq.signal })),
  );
  server.setRequestHandler('resources/templates/list', () => ({
    resourceTemplates: [CHANNEL_TEMPLATE],
  }));
  server.setRequestHandler('resources/read', (request, ctx) =>
    refusalAsError(readResource(api, request.params.uri, { signal: ctx.mcpReq.signal })),
  );
}

/**
 * MCP's code for a resource that does not exist in 2025-11-25 and earlier ("Resources", Error
 * Handling). 2026-07-28 made it -32602 (Invalid Params, with the URI as `data.uri`), and the SDK
 * 2.x answers that in every era: what this server throws is -32002, sent as -32602 to a client
 * of 2026-07-28 and put back to -32002 for one of the 2025 era (resourceNotFoundOf2025).
 */
const RESOURCE_NOT_FOUND = -32002;

/** How this server's "resource not found" starts (notFound below). */
const NOT_FOUND = 'Resource not found: ';

/**
 * `message` as the 2025 era has it: this server's "resource not found", which the SDK 2.x sends
 * as -32602, with that era's -32002 again; any other message as it is. For answers to requests
 * of that era only (the sidecar's /mcp and `agent-gateway mcp` know which are).
 */
export function resourceNotFoundOf2025(message: JSONRPCMessage): JSONRPCMessage {
  if (!('error' in message) || message.error.code !== ProtocolErrorCode.InvalidParams) {
    return message;
  }
  const { data } = message.error as { data?: { uri?: unknown } };
  if (typeof data?.uri !== 'string' || !message.error.message.startsWith(NOT_FOUND)) return message;
  return { ...message, error: { ...message.error, code: RESOURCE_NOT_FOUND } };
}

const CHANNELS_URI = 'agw://channels';

const CHANNEL_TEMPLATE: ResourceTemplateType = {
  uriTemplate: `${CHANNELS_URI}/{name}`,
  name: 'channel',
  title: 'A channel of yours',
  description:
    'One channel you are a member of: its name and its members (agent ids). Send to it with send_message to = the name.',
  mimeType: 'application/json',
};

const channelUri = (name: string) => `${CHANNELS_URI}/${pathSegment(name)}`;

/** `me`'s answer, asked for each list and read: the topology may change while a client stays. */
async function whoIAm(api: AgentApi, opts: CallOptions): Promise<Me> {
  const me = await api.me({}, opts);
  return me instanceof JsonText ? me.value() : me;
}

/**
 * A resource has no isError: a refusal of the operation under it is the request's error, with
 * the catalogue's body as its data.
 */
async function refusalAsError<T>(read: Promise<T>): Promise<T> {
  try {
    return await read;
  } catch (err) {
    if (!isGatewayError(err)) throw err;
    const retry = err.retryAfterS === undefined ? {} : { retry_after_s: err.retryAfterS };
    throw new ProtocolError(-32000, `${err.code}: ${err.message}`, { ...err.toJSON(), ...retry });
  }
}

async function listResources(api: AgentApi, opts: CallOptions): Promise<{ resources: Resource[] }> {
  const me = await whoIAm(api, opts);
  return {
    resources: [
      {
        uri: CHANNELS_URI,
        name: 'channels',
        title: 'Your channels',
        description: `The channels ${me.agent} is a member of, each with its members; ${CHANNEL_TEMPLATE.uriTemplate} for one.`,
        mimeType: 'application/json',
      },
      ...me.channels.map((c) => ({
        uri: channelUri(c.name),
        name: c.name,
        title: `Channel ${c.name}`,
        description: `The members of ${c.name} (${c.members.length}).`,
        mimeType: 'application/json',
      })),
    ],
  };
}

async function readResource(
  api: AgentApi,
  uri: string,
  opts: CallOptions,
): Promise<ReadResourceResult> {
  const json = (value: unknown): ReadResourceResult => ({
    contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(value) }],
  });
  const prefix = `${CHANNELS_URI}/`;
  if (uri !== CHANNELS_URI && !uri.startsWith(prefix)) throw notFound(uri);
  const me = await whoIAm(api, opts);
  const channels = me.channels.map((c) => ({
    name: c.name,
    members: c.members,
    uri: channelUri(c.name),
  }));
  if (uri === CHANNELS_URI) return json({ agent: me.agent, channels });
  let name: string;
  try {
    name = decodeURIComponent(uri.slice(prefix.length));
  } catch {
    throw notFound(uri);
  }
  const one = channels.find((c) => c.name === name);
  if (one === undefined) throw notFound(uri, `${me.agent} is no member of a channel "${name}"`);
  return json(one);
}

function notFound(uri: string, why = `no resource here is named ${uri}`): ProtocolError {
  const message = `${NOT_FOUND}${why} (${CHANNELS_URI} lists yours)`;
  return new ProtocolError(RESOURCE_NOT_FOUND, message, { uri });
}
