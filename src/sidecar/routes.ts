/**
 * The sidecar's endpoints (docs/reference/sidecar.md describes each): the agent's operations,
 * rendered from their declarations (protocol/agent-api.ts) onto the service, and the sidecar's
 * own (probes, metrics, MCP, its OpenAPI document). `who`: `local` endpoints answer always
 * (probes, status, metrics, emergencies, which must work while the adapter is down or the
 * sidecar stops); `agent` endpoints stop taking requests once the sidecar is stopping.
 */

import {
  type AgentApi,
  JsonText,
  OPERATION_LIST,
  type Operation,
  type OperationName,
  type Outputs,
  pathParams,
} from '../protocol/agent-api.js';
import { BODIES } from '../protocol/agent-schemas.js';
import { GatewayError } from '../protocol/errors.js';
import { intParam } from '../protocol/http.js';
import { DEFAULT_MAX_MESSAGE_BYTES } from '../protocol/limits.js';
import { type Answer, type Route, route } from '../protocol/router.js';
import { traceFromHeaders } from '../protocol/trace-context.js';
import type { StartGate } from './gate.js';
import type { McpHandler } from './mcp-endpoint.js';
import { sidecarOpenApiDocument } from './route-docs.js';

export type Who = 'local' | 'agent';

/** The largest body the sidecar reads: an envelope the adapter could take at its default. */
const MAX_BODY = DEFAULT_MAX_MESSAGE_BYTES;

export function sidecarRoutes(
  api: AgentApi,
  gate: StartGate,
  metrics: { metrics(): Promise<string>; contentType: string },
  adapterUrl: string,
  /** Serves one MCP request (mcp-endpoint.ts): it writes the response itself. */
  mcp: McpHandler,
  version: string,
): Route<Who, undefined>[] {
  return [
    route({
      method: 'GET',
      path: '/healthz',
      who: 'local',
      handler: () => ({ body: { status: 'ok' } }),
    }),
    route({
      method: 'GET',
      path: '/readyz',
      who: 'local',
      handler: () => {
        if (gate.isOpen) return { body: { status: 'ready' } };
        throw new GatewayError(
          'not_ready',
          `the adapter at ${adapterUrl} has not answered /health yet`,
        );
      },
    }),
    route({
      method: 'GET',
      path: '/metrics',
      who: 'local',
      handler: async () => ({ body: await metrics.metrics(), contentType: metrics.contentType }),
    }),
    route({
      method: 'GET',
      path: '/openapi.json',
      who: 'local',
      handler: () => ({ body: sidecarOpenApiDocument(version) }),
    }),
    ...OPERATION_LIST.map((op) => operationRoute(api, op)),
    route({
      // Streamable HTTP, stateless: GET and DELETE (a session's stream, its end) are 405 here.
      // No `body`: the endpoint reads its own (mcp-endpoint.ts, MCP_MAX_BODY_BYTES), so that
      // one too large is answered in MCP's terms, a tool error naming payload_too_large
      method: 'POST',
      path: '/mcp',
      who: 'agent',
      handler: async ({ req, res }) => {
        await mcp(req, res, undefined);
        return undefined;
      },
    }),
  ];
}

/**
 * One operation as a route: its input gathered from the path, the query (each parameter within
 * its declared bounds) and the checked body; its result answered with its status. The body's
 * bytes go along too: a send passes a checked envelope on to the adapter as it came.
 */
function operationRoute(api: AgentApi, op: Operation): Route<Who, undefined> {
  const body = BODIES[op.name];
  const params = pathParams(op.path);
  return route({
    method: op.method,
    path: op.path,
    who: op.who,
    ...(body === undefined
      ? {}
      : {
          body: {
            limit: MAX_BODY,
            parse: (raw: Buffer) => ({ fields: body.parse(raw) as object, raw }),
          },
        }),
    handler: async (call) => {
      const input: Record<string, unknown> = { ...call.body?.fields };
      for (const p of params) input[p] = call.params[p];
      for (const q of op.query ?? [])
        input[q.name] = intParam(call.query, q.name, q.default, q.min, q.max);
      const run = api[op.name] as (i: unknown, o: object) => unknown;
      const result = await run.call(api, input, {
        raw: call.body?.raw,
        trace: traceFromHeaders(call.req.headers),
        // made when read: a request's AbortSignal costs a controller and listeners, which only
        // the long polls need (a send at 1 in flight lost a fifth of its rate to it)
        get signal() {
          return call.signal;
        },
      });
      return answerOf(op.name, result as JsonText | Outputs[OperationName]);
    },
  });
}

/** A result as an HTTP answer: the adapter's JSON as it came, or the value; its status. */
export function answerOf(name: OperationName, result: JsonText | Outputs[OperationName]): Answer {
  if (result instanceof JsonText) return { status: result.status ?? 200, body: result.text };
  return { status: statusOf(name, result), body: result };
}

/** The status a result is answered with: the usual one, or, for a send, what became of it. */
function statusOf(name: OperationName, result: Outputs[OperationName]): number {
  if (name !== 'send') return OPERATION_LIST.find((op) => op.name === name)!.statuses[0]!;
  const sent = result as Outputs['send'];
  if (sent.status === 'queued') return 202;
  return sent.duplicate ? 200 : 201;
}
