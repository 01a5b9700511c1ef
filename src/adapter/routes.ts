/**
 * The adapter's endpoints, in one table (docs/reference/adapter-api.md describes each). `who`:
 * `public` needs no token (probes, metrics); `agent` needs an agent's bearer token; `alerts_to`
 * needs the alerts_to agent's. Writes go through messages.ts, everything about deliveries
 * through the delivery service.
 */
import type { ServerResponse } from 'node:http';
import { parseDeliveryIds, parseLeaseExtension, parseNack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import { intParam } from '../protocol/http.js';
import {
  INBOX_DEFAULT_MAX,
  INBOX_MAX,
  MAX_BATCH,
  MAX_DEPTH,
  MAX_WAIT_S,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  pageBudget,
} from '../protocol/limits.js';
import { type Route, route } from '../protocol/router.js';
import { VERSION } from '../protocol/version.js';
import { deadLetterIdOf } from '../protocol/wire.js';
import type { DeliveryService } from './delivery.js';
import { postBatch, postMessage, readChannel, type WriteContext } from './messages.js';
import type { AdapterMetrics } from './metrics.js';
import { AgentSlots, pageParts, type ResponseBudget } from './response-budget.js';
import { adapterOpenApiDocument } from './route-docs.js';
import type { Topology } from './topology.js';

export type Who = 'public' | 'agent' | 'alerts_to';
/** The authenticated agent ('' on public routes). */
export interface Caller {
  readonly agent: string;
}

export interface RouteDeps {
  readonly write: WriteContext;
  readonly delivery: DeliveryService;
  readonly metrics: AdapterMetrics;
  readonly topology: Topology;
  /** AGW_MAX_LEASE_MS: the longest lease an extension may ask for. */
  readonly maxLeaseMs: number;
  /** AGW_MAX_PAGE_BYTES: the byte bound of a replay, inbox or dead-letter page. */
  readonly maxPageBytes: number;
  /** AGW_MAX_POLLS_PER_AGENT: concurrent GET /v1/inbox of one agent; past it 429. */
  readonly maxPollsPerAgent: number;
  /** AGW_MAX_READS_PER_AGENT: concurrent replay, thread and dead-letter reads of one agent. */
  readonly maxReadsPerAgent: number;
  /** The answers in flight, and how a page is written out (response-budget.ts). */
  readonly responses: ResponseBudget;
  /** 200 when ready; throws not_ready with the reason otherwise. */
  readonly health: () => Promise<void>;
}

/** A body of delivery ids: 1,000 ids fit easily. */
const IDS_BODY_LIMIT = 64 * 1024;
const raw = (b: Buffer) => b;
const deliveryIds = { limit: IDS_BODY_LIMIT, parse: (b: Buffer) => parseDeliveryIds(b) };
const afterParam = (q: URLSearchParams) => intParam(q, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
const limitParam = (q: URLSearchParams) =>
  intParam(q, 'limit', PAGE_DEFAULT_LIMIT, 1, PAGE_MAX_LIMIT);

export function adapterRoutes(d: RouteDeps): Route<Who, Caller>[] {
  const { write, delivery, metrics, topology } = d;
  const maxBytes = write.maxMessageBytes;
  const { maxPageBytes, responses } = d;
  // A parked poll costs a socket and, once woken, a page of up to AGW_MAX_PAGE_BYTES; without a
  // bound one agent's token could hold thousands (the sidecar keeps 16 at most).
  const polls = new AgentSlots(
    d.maxPollsPerAgent,
    (agent, n) =>
      new GatewayError(
        'too_many_polls',
        `${agent} already has ${n} inbox requests open (AGW_MAX_POLLS_PER_AGENT); retry when one ends`,
        { retryAfterS: 1 },
      ),
  );
  // A replay, thread or dead-letter read holds a page until its client has taken it.
  const reads = new AgentSlots(
    d.maxReadsPerAgent,
    (agent, n) =>
      new GatewayError(
        'too_many_reads',
        `${agent} already has ${n} replay, thread or dead-letter reads open (AGW_MAX_READS_PER_AGENT); retry when one ends`,
        { retryAfterS: 1 },
      ),
  );
  /**
   * A paged read: the caller's slot, then a page's bound of the bytes in flight, both until the
   * answer is out (or its connection gone); the page read; its parts written as taken.
   */
  const paged = async (
    agent: string,
    res: ServerResponse,
    read: () => Promise<string[]>,
  ): Promise<undefined> => {
    reads.hold(agent, res);
    const reservation = responses.reserve(res, maxPageBytes);
    await responses.send(res, reservation, await read());
    return undefined;
  };

  /**
   * A poll, after the acks it carries (POST /v1/inbox). Both are queued in the same turn, so
   * they go into one group commit, the lease after the ack (group-commit.ts): a channel whose
   * message the ack settles hands over its next one in this very answer. The answer is the
   * inbox's with the ack's fields before it; another agent's delivery is in its `unknown`, as
   * in POST /v1/acks. An ack that fails (its commit failed) fails the request and ends the poll:
   * what the same commit leased is not handed over and comes again when its lease ends, as after
   * any lost answer.
   */
  const inbox = async (
    agent: string,
    query: URLSearchParams,
    res: ServerResponse,
    ack?: readonly number[],
  ): Promise<undefined> => {
    const wait = intParam(query, 'wait', 0, 0, MAX_WAIT_S);
    const max = intParam(query, 'max', INBOX_DEFAULT_MAX, 1, INBOX_MAX);
    polls.enter(agent);
    try {
      const gone = new Promise((resolve) => res.once('close', resolve));
      const acking = ack === undefined ? undefined : delivery.ack(agent, ack);
      // settles only if the ack is refused: the poll then ends at once
      const refused = acking?.then(
        () => new Promise(() => {}),
        () => undefined,
      );
      const closed = refused === undefined ? gone : Promise.race([gone, refused]);
      const got = await delivery.inbox(agent, wait, max, closed, pageBudget(maxPageBytes));
      const head = acking === undefined ? '{' : `${ackFields(await acking)},`;
      // leased already: counted in the bytes in flight, never refused for them
      const reservation = responses.reserve(res, 0, true);
      await responses.send(res, reservation, pageParts(`${head}"deliveries":[`, got, ']}'));
      return undefined;
    } finally {
      polls.leave(agent);
    }
  };
  return [
    route({
      method: 'GET',
      path: '/healthz',
      who: 'public',
      handler: () => ({ body: { status: 'ok' } }),
    }),
    route({
      method: 'GET',
      path: '/health',
      who: 'public',
      handler: async () => {
        await d.health();
        return { body: { status: 'ready' } };
      },
    }),
    route({
      method: 'GET',
      path: '/metrics',
      who: 'public',
      handler: async () => ({
        body: await metrics.registry.metrics(),
        contentType: metrics.registry.contentType,
      }),
    }),
    route({
      method: 'GET',
      path: '/openapi.json',
      who: 'public',
      handler: () => ({ body: adapterOpenApiDocument(VERSION) }),
    }),
    route({
      method: 'POST',
      path: '/v1/messages',
      who: 'agent',
      body: { limit: maxBytes, parse: raw },
      handler: async ({ ctx, body }) => {
        const { status, ack } = await metrics.counted(postMessage(write, ctx.agent, body), (r) =>
          r.ack.duplicate ? 'duplicate' : 'created',
        );
        return { status, body: ack };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/messages/batch',
      who: 'agent',
      // Each item is held to the single-message limit; the whole body to a batch of them.
      body: { limit: maxBytes * MAX_BATCH, parse: raw },
      handler: async ({ ctx, body }) => {
        const results = await metrics.counted(postBatch(write, ctx.agent, body), () => 'batch');
        return { body: { results } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/channels/:name/messages',
      who: 'agent',
      handler: ({ ctx, params, query, res }) =>
        paged(ctx.agent, res, () =>
          readChannel(
            write,
            ctx.agent,
            params.name!,
            afterParam(query),
            limitParam(query),
            maxPageBytes,
          ),
        ),
    }),
    route({
      method: 'GET',
      path: '/v1/inbox',
      who: 'agent',
      handler: ({ ctx, query, res }) => inbox(ctx.agent, query, res),
    }),
    route({
      // acks carried on the next poll: one request and one commit where two of each were
      method: 'POST',
      path: '/v1/inbox',
      who: 'agent',
      body: deliveryIds,
      handler: ({ ctx, query, res, body }) => inbox(ctx.agent, query, res, body),
    }),
    route({
      method: 'POST',
      path: '/v1/acks',
      who: 'agent',
      body: deliveryIds,
      handler: async ({ ctx, body }) => ({ body: await delivery.ack(ctx.agent, body) }),
    }),
    route({
      method: 'POST',
      path: '/v1/nacks',
      who: 'agent',
      body: { limit: IDS_BODY_LIMIT, parse: (b: Buffer) => parseNack(b) },
      handler: async ({ ctx, body }) => ({ body: await delivery.nack(ctx.agent, body) }),
    }),
    route({
      method: 'POST',
      path: '/v1/leases',
      who: 'agent',
      body: { limit: IDS_BODY_LIMIT, parse: (b: Buffer) => parseLeaseExtension(b, d.maxLeaseMs) },
      handler: async ({ ctx, body }) => ({ body: await delivery.extend(ctx.agent, body) }),
    }),
    route({
      method: 'GET',
      path: '/v1/messages/:message_id',
      who: 'agent',
      handler: async ({ ctx, params }) => ({
        body: await delivery.messageStatus(ctx.agent, params.message_id!, topology.alertsTo),
      }),
    }),
    route({
      method: 'GET',
      path: '/v1/messages/:message_id/journey',
      who: 'agent',
      handler: async ({ ctx, params }) => ({
        body: await delivery.journey(ctx.agent, params.message_id!, topology.alertsTo),
      }),
    }),
    route({
      method: 'GET',
      path: '/v1/threads/:thread_id/messages',
      who: 'alerts_to',
      // The operator's view of a conversation: every channel's messages of the thread in commit
      // order. next_after is the store's cursor (opaque to readers: pass it back as `after`),
      // null once a page is empty, as for replay.
      handler: ({ ctx, params, query, res }) =>
        paged(ctx.agent, res, async () => {
          const page = await write.store.threadMessages(
            params.thread_id!,
            afterParam(query),
            limitParam(query),
            pageBudget(maxPageBytes),
          );
          return pageParts('{"messages":[', page.messages, `],"next_after":${page.nextAfter}}`);
        }),
    }),
    route({
      method: 'GET',
      path: '/v1/me',
      who: 'agent',
      handler: ({ ctx }) => ({
        body: {
          agent: ctx.agent,
          channels: [...topology.channels.values()]
            .filter((c) => c.members.has(ctx.agent))
            .map((c) => ({ name: c.name, members: [...c.members] })),
          alerts_to: topology.alertsTo,
          limits: { max_message_bytes: maxBytes, max_batch: MAX_BATCH, max_depth: MAX_DEPTH },
        },
      }),
    }),
    route({
      method: 'POST',
      path: '/v1/heartbeat',
      who: 'agent',
      handler: async ({ ctx }) => ({ body: await delivery.heartbeat(ctx.agent) }),
    }),
    route({
      method: 'GET',
      path: '/v1/agents',
      who: 'alerts_to',
      handler: async () => {
        const agents = (await delivery.agents(topology.agents.keys())).map((a) => ({
          ...a,
          role: topology.agents.get(a.id)?.role ?? null,
        }));
        return { body: { agents } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/dead-letters',
      who: 'alerts_to',
      handler: ({ ctx, query, res }) =>
        paged(ctx.agent, res, async () => {
          const limit = limitParam(query);
          const after = afterParam(query);
          const rows = await delivery.deadLetters(after, limit, pageBudget(maxPageBytes));
          // as for replay: the `after` of the next page, null once a page is empty
          const next = rows.length === 0 ? null : deadLetterIdOf(rows[rows.length - 1]!);
          return pageParts('{"dead_letters":[', rows, `],"next_after":${next}}`);
        }),
    }),
    route({
      method: 'POST',
      path: '/v1/dead-letters/:id/replay',
      who: 'alerts_to',
      handler: async ({ params }) => {
        const id = Number(params.id);
        if (!/^\d+$/.test(params.id!))
          throw new GatewayError('not_found', `no endpoint for dead letter "${params.id}"`);
        const r = await delivery.replayDeadLetter(id);
        if (r === undefined) throw new GatewayError('unknown_dead_letter', `no dead letter ${id}`);
        return { status: r.replayed ? 201 : 200, body: r };
      },
    }),
  ];
}

/** An ack's answer as the opening members of a JSON object: `{"acked":[..],...`. */
function ackFields(a: { acked: unknown; dead_lettered: unknown; unknown: unknown }): string {
  return JSON.stringify(a).slice(0, -1);
}
