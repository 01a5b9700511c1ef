/**
 * The sidecar's endpoints, in one table (docs/reference/sidecar.md describes each), each a thin
 * map of HTTP onto the service's operations. `who`: `local` endpoints answer always (probes,
 * status, metrics, emergencies, which must work while the adapter is down or the sidecar
 * stops); `agent` endpoints stop taking requests once the sidecar is stopping.
 */
import { parseDeliveryIds, parseLeaseExtension, parseNack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import { intParam, parseJson } from '../protocol/http.js';
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  INBOX_DEFAULT_MAX,
  INBOX_MAX,
  MAX_WAIT_S,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  SIDECAR_MAX_EXTEND_MS,
} from '../protocol/limits.js';
import { type Route, route } from '../protocol/router.js';
import type { StartGate } from './gate.js';
import type { McpHandler } from './mcp-endpoint.js';
import type { SidecarService } from './service.js';

export type Who = 'local' | 'agent';

/** The largest body the sidecar reads: an envelope the adapter could take at its default. */
const MAX_BODY = DEFAULT_MAX_MESSAGE_BYTES;
const json = { limit: MAX_BODY, parse: parseJson };
const deliveryIds = {
  limit: MAX_BODY,
  parse: (b: Buffer) => parseDeliveryIds(b, { negativeToo: true }),
};

/** Room in an MCP request for the JSON-RPC around a tool's arguments (an envelope at most). */
const MCP_FRAME_BYTES = 16_384;

export function sidecarRoutes(
  service: SidecarService,
  gate: StartGate,
  metrics: { metrics(): Promise<string>; contentType: string },
  adapterUrl: string,
  /** Serves one MCP request (mcp-endpoint.ts): it writes the response itself. */
  mcp: McpHandler,
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
      path: '/v1/status',
      who: 'local',
      handler: () => ({ body: service.status() }),
    }),
    route({
      method: 'POST',
      path: '/v1/emergency',
      who: 'local',
      body: json,
      handler: ({ body }) => service.emergency(body),
    }),
    route({
      method: 'POST',
      path: '/v1/messages',
      who: 'agent',
      // the bytes too: a checked envelope goes on to the adapter as it came (service.send)
      body: { limit: MAX_BODY, parse: (raw: Buffer) => ({ value: parseJson(raw), raw }) },
      handler: ({ body }) => service.send(body.value, body.raw),
    }),
    route({
      method: 'GET',
      path: '/v1/inbox',
      who: 'agent',
      handler: ({ query, signal }) =>
        service.inbox(
          intParam(query, 'wait', 0, 0, MAX_WAIT_S),
          intParam(query, 'max', INBOX_DEFAULT_MAX, 1, INBOX_MAX),
          undefined,
          signal,
        ),
    }),
    route({
      // acks carried on the poll (service.inbox): one request instead of two
      method: 'POST',
      path: '/v1/inbox',
      who: 'agent',
      body: deliveryIds,
      handler: ({ query, body, signal }) =>
        service.inbox(
          intParam(query, 'wait', 0, 0, MAX_WAIT_S),
          intParam(query, 'max', INBOX_DEFAULT_MAX, 1, INBOX_MAX),
          body,
          signal,
        ),
    }),
    route({
      method: 'POST',
      path: '/v1/acks',
      who: 'agent',
      body: deliveryIds,
      handler: ({ body }) => service.ack(body),
    }),
    route({
      method: 'POST',
      path: '/v1/nacks',
      who: 'agent',
      body: { limit: MAX_BODY, parse: (b: Buffer) => parseNack(b, { negativeToo: true }) },
      handler: ({ body }) => service.nack(body),
    }),
    route({
      method: 'POST',
      path: '/v1/leases',
      who: 'agent',
      // the adapter holds extensions to its AGW_MAX_LEASE_MS; here only their shape is checked
      body: {
        limit: MAX_BODY,
        parse: (b: Buffer) => parseLeaseExtension(b, SIDECAR_MAX_EXTEND_MS, { negativeToo: true }),
      },
      handler: ({ body }) => service.extendLeases(body),
    }),
    route({
      method: 'GET',
      path: '/v1/messages/:message_id',
      who: 'agent',
      handler: ({ params }) => service.messageStatus(params.message_id!),
    }),
    route({ method: 'GET', path: '/v1/me', who: 'agent', handler: () => service.me() }),
    route({
      method: 'GET',
      path: '/v1/outbox/dead-letters',
      who: 'local',
      handler: ({ query }) =>
        service.outboxDeadLetters(
          intParam(query, 'after', 0, 0, Number.MAX_SAFE_INTEGER),
          intParam(query, 'limit', PAGE_DEFAULT_LIMIT, 1, PAGE_MAX_LIMIT),
        ),
    }),
    route({
      method: 'POST',
      path: '/v1/heartbeat',
      who: 'agent',
      handler: () => service.heartbeat(),
    }),
    route({
      // Streamable HTTP, stateless: GET and DELETE (a session's stream, its end) are 405 here
      method: 'POST',
      path: '/mcp',
      who: 'agent',
      body: { limit: MAX_BODY + MCP_FRAME_BYTES, parse: parseJson },
      handler: async ({ req, res, body }) => {
        await mcp(req, res, body);
        return undefined;
      },
    }),
    route({
      method: 'GET',
      path: '/v1/channels/:name/messages',
      who: 'agent',
      handler: ({ params, query }) =>
        service.readChannel(
          params.name!,
          intParam(query, 'after', 0, 0, Number.MAX_SAFE_INTEGER),
          intParam(query, 'limit', PAGE_DEFAULT_LIMIT, 1, PAGE_MAX_LIMIT),
        ),
    }),
  ];
}
