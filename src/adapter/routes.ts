/**
 * The adapter's endpoints, in one table (docs/reference/adapter-api.md describes each). `who`:
 * `public` needs no token (probes, metrics); `agent` needs an agent's bearer token; `alerts_to`
 * needs the alerts_to agent's. Writes go through messages.ts, everything about deliveries
 * through the delivery service.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CONSOLE_HTML, type ConsoleAsset, consoleAsset } from '../console/page.js';
import { parseDeliveryIds, parseLeaseExtension, parseNack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import { intParam } from '../protocol/http.js';
import {
  INBOX_DEFAULT_MAX,
  INBOX_MAX,
  MAX_BATCH,
  MAX_DEPTH,
  MAX_REPLY_WAIT_S,
  MAX_WAIT_S,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  pageBudget,
} from '../protocol/limits.js';
import { type Route, route } from '../protocol/router.js';
import { traceFromHeaders } from '../protocol/trace-context.js';
import { VERSION } from '../protocol/version.js';
import { deadLetterIdOf } from '../protocol/wire.js';
import { assertRedriveId } from '../store/rules/operators.js';
import { handedOver, received, startReceive, startSettle } from '../telemetry/messaging.js';
import type { DeliveryService } from './delivery.js';
import { postBatch, postMessage, readChannel, type WriteContext } from './messages.js';
import type { AdapterMetrics } from './metrics.js';
import {
  deadLetterFilter,
  type OperatorActs,
  parseRedrive,
  REDRIVE_BODY_LIMIT,
  textParams,
} from './operators.js';
import { AgentSlots, pageParts, type ResponseBudget } from './response-budget.js';
import { adapterOpenApiDocument } from './route-docs.js';
import type { Topology } from './topology.js';

/**
 * Who may call a route (server.ts's guard decides from the bearer token):
 * - `public`: anyone (probes, metrics, the console's page);
 * - `agent`: an agent (an operator gets 403 `not_an_agent`: it has no inbox);
 * - `sender`: an agent, or an operator, whose messages have the sender `operator:<id>`;
 * - `reader`: an agent, or an operator, who oversees every message (its status, its journey);
 * - `overseer`: the alerts_to agent or an operator (dead letters, replay, threads, agents);
 * - `operator`: an operator alone (pause, resume, search, redrive, audit).
 */
export type Who = 'public' | 'agent' | 'sender' | 'reader' | 'overseer' | 'operator';
/** Who called: `agent` is the agent's id or `operator:<id>` ('' on public routes). */
export interface Caller {
  readonly agent: string;
  /** The alerts_to agent or an operator: sees every message. */
  readonly overseer: boolean;
  /** An operator's `operator:<id>`; undefined for an agent. */
  readonly operator: string | undefined;
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
  /** Operators' acts: pause, resume, redrive, and the audit entries of the others. */
  readonly acts: OperatorActs;
  /** AGW_CONSOLE: the console's page and files are served (else 404). */
  readonly console: boolean;
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
  const { tracing } = write;
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
  // A wait for an ask's reply is a long poll too: a bound of its own, as large.
  const replyWaits = new AgentSlots(
    d.maxPollsPerAgent,
    (agent, n) =>
      new GatewayError(
        'too_many_polls',
        `${agent} already has ${n} waits for a reply open (AGW_MAX_POLLS_PER_AGENT); retry when one ends`,
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
    req: IncomingMessage,
    res: ServerResponse,
    ack?: readonly number[],
  ): Promise<undefined> => {
    const wait = intParam(query, 'wait', 0, 0, MAX_WAIT_S);
    const max = intParam(query, 'max', INBOX_DEFAULT_MAX, 1, INBOX_MAX);
    polls.enter(agent);
    // recorded only if it hands something over (received)
    const span = tracing.on
      ? startReceive(tracing, agent, traceFromHeaders(req.headers))
      : undefined;
    try {
      const gone = new Promise((resolve) => res.once('close', resolve));
      const acking = ack === undefined ? undefined : delivery.ack(agent, ack);
      if (acking !== undefined && tracing.on && ack!.length > 0) {
        // the acks a poll carries: their settle span ends with their commit
        const settle = startSettle(tracing, 'ack', agent, traceFromHeaders(req.headers), ack!);
        acking.then(
          () => settle.end(),
          (err: unknown) => {
            settle.fail(err);
            settle.end();
          },
        );
      }
      // settles only if the ack is refused: the poll then ends at once
      const refused = acking?.then(
        () => new Promise(() => {}),
        () => undefined,
      );
      const closed = refused === undefined ? gone : Promise.race([gone, refused]);
      const got = await delivery.inbox(agent, wait, max, closed, pageBudget(maxPageBytes));
      if (span !== undefined) received(span, got.map(handedOver));
      const head = acking === undefined ? '{' : `${ackFields(await acking)},`;
      // leased already: counted in the bytes in flight, never refused for them
      const reservation = responses.reserve(res, 0, true);
      await responses.send(res, reservation, pageParts(`${head}"deliveries":[`, got, ']}'));
      return undefined;
    } finally {
      polls.leave(agent);
    }
  };
  /** An ack or a nack, in its `settle` span when tracing is on (a rejection dead-letters). */
  const settled = async <R>(
    req: IncomingMessage,
    agent: string,
    operation: 'ack' | 'nack',
    ids: readonly number[],
    run: () => Promise<R>,
    nack?: { retry: boolean },
  ): Promise<{ body: R }> => {
    if (!tracing.on) return { body: await run() };
    const span = startSettle(tracing, operation, agent, traceFromHeaders(req.headers), ids);
    try {
      const body = await run();
      if (nack?.retry === false) {
        for (const id of (body as { nacked?: number[] }).nacked ?? []) {
          span.event('dead_letter', { 'agw.delivery_id': id, 'agw.reason': 'rejected' });
        }
      }
      return { body };
    } catch (err) {
      span.fail(err);
      throw err;
    } finally {
      span.end();
    }
  };
  const pauseRoute = async (ctx: Caller, agent: string, resume: boolean) => {
    if (!topology.agents.has(agent))
      throw new GatewayError('unknown_agent', `no agent "${agent.slice(0, 64)}" in the topology`);
    const a = await d.acts.pause(agent, ctx.agent, resume);
    return {
      body: {
        agent,
        paused: a.paused !== null,
        since: a.paused === null ? null : new Date(a.paused.since).toISOString(),
        by: a.paused?.by ?? null,
        changed: a.changed,
      },
    };
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
      method: 'GET',
      path: '/console',
      who: 'public',
      handler: ({ res }) => {
        if (!d.console) throw new GatewayError('not_found', 'the console is off (AGW_CONSOLE=off)');
        return consoleAnswer(res, { body: CONSOLE_HTML, contentType: 'text/html; charset=utf-8' });
      },
    }),
    route({
      method: 'GET',
      path: '/console/:file',
      who: 'public',
      handler: ({ res, params }) => {
        const asset = d.console ? consoleAsset(params.file!) : undefined;
        if (asset === undefined)
          throw new GatewayError('not_found', `no console file "${params.file!.slice(0, 64)}"`);
        return consoleAnswer(res, asset);
      },
    }),
    route({
      method: 'POST',
      path: '/v1/messages',
      who: 'sender',
      body: { limit: maxBytes, parse: raw },
      handler: async ({ ctx, body, req }) => {
        // an operator's message and a continuation are audited in their commit (messages.ts)
        const { status, ack } = await metrics.counted(
          postMessage(write, ctx.agent, body, traceFromHeaders(req.headers)),
          (r) => (r.ack.duplicate ? 'duplicate' : 'created'),
        );
        return { status, body: ack };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/messages/batch',
      who: 'sender',
      // Each item is held to the single-message limit; the whole body to a batch of them.
      body: { limit: maxBytes * MAX_BATCH, parse: raw },
      handler: async ({ ctx, body, req }) => {
        const results = await metrics.counted(
          postBatch(write, ctx.agent, body, traceFromHeaders(req.headers)),
          () => 'batch',
        );
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
      handler: ({ ctx, query, req, res }) => inbox(ctx.agent, query, req, res),
    }),
    route({
      // acks carried on the next poll: one request and one commit where two of each were
      method: 'POST',
      path: '/v1/inbox',
      who: 'agent',
      body: deliveryIds,
      handler: ({ ctx, query, req, res, body }) => inbox(ctx.agent, query, req, res, body),
    }),
    route({
      method: 'POST',
      path: '/v1/acks',
      who: 'agent',
      body: deliveryIds,
      handler: ({ ctx, body, req }) =>
        settled(req, ctx.agent, 'ack', body, () => delivery.ack(ctx.agent, body)),
    }),
    route({
      method: 'POST',
      path: '/v1/nacks',
      who: 'agent',
      body: { limit: IDS_BODY_LIMIT, parse: (b: Buffer) => parseNack(b) },
      handler: ({ ctx, body, req }) =>
        settled(req, ctx.agent, 'nack', body.ids, () => delivery.nack(ctx.agent, body), body),
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
      who: 'reader',
      handler: async ({ ctx, params }) => ({
        body: await delivery.messageStatus(ctx, params.message_id!, topology.alertsTo),
      }),
    }),
    route({
      // a scheduled message's sender (an agent or an operator) cancels it before it fires
      // (docs/design/time.md); an operator's and alerts_to's cancel is audited
      method: 'DELETE',
      path: '/v1/messages/:message_id',
      who: 'sender',
      handler: async ({ ctx, params, res }) => {
        await delivery.cancelScheduled(ctx.agent, params.message_id!, ctx.overseer);
        res.writeHead(204).end();
        return undefined;
      },
    }),
    route({
      method: 'GET',
      path: '/v1/messages/:message_id/journey',
      who: 'reader',
      handler: async ({ ctx, params }) => ({
        body: await delivery.journey(ctx, params.message_id!, topology.alertsTo),
      }),
    }),
    route({
      // an ask's reply (docs/design/time.md, "Asking"), taken out of its lane for the asker
      method: 'GET',
      path: '/v1/messages/:message_id/reply',
      who: 'agent',
      handler: async ({ ctx, params, query, res }) => {
        const wait = intParam(query, 'wait', 0, 0, MAX_REPLY_WAIT_S);
        replyWaits.enter(ctx.agent);
        try {
          const gone = new Promise((resolve) => res.once('close', resolve));
          const got = await delivery.reply(ctx.agent, params.message_id!, wait, gone);
          // taken already: counted in the bytes in flight, never refused for them
          const reservation = responses.reserve(res, 0, true);
          await responses.send(res, reservation, ['{"delivery":', got ?? 'null', '}']);
          return undefined;
        } finally {
          replyWaits.leave(ctx.agent);
        }
      },
    }),
    route({
      method: 'GET',
      path: '/v1/threads/:thread_id/messages',
      who: 'overseer',
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
      who: 'overseer',
      handler: async () => {
        const stalled = delivery.stalls?.stalled ?? new Set<string>();
        const agents = (await delivery.agents(topology.agents.keys())).map((a) => ({
          id: a.id,
          role: topology.agents.get(a.id)?.role ?? null,
          last_poll: a.last_poll,
          pending: a.pending,
          critical_pending: a.critical_pending,
          leased: a.leased,
          dead_letters: a.dead_letters,
          stalled: stalled.has(a.id),
          paused: a.paused,
          paused_since: a.paused_since,
          paused_by: a.paused_by,
          last_seen: a.last_seen,
          queue_depth: a.queue_depth,
          critical_depth: a.critical_depth,
        }));
        return { body: { agents } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/channels',
      who: 'overseer',
      handler: async () => {
        const last = await write.store.lastSequences();
        const channels = [...topology.channels.values()].map((c) => ({
          name: c.name,
          members: [...c.members],
          last_sequence: last[c.name] ?? 0,
        }));
        return { body: { channels } };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/messages',
      who: 'operator',
      // search, newest first; next_after is the store's cursor (opaque: pass it back as `after`)
      handler: ({ ctx, query, res }) =>
        paged(ctx.agent, res, async () => {
          const page = await write.store.searchMessages(
            {
              ...textParams(query, ['q', 'channel', 'sender', 'kind']),
              after: afterParam(query),
              limit: limitParam(query),
            },
            pageBudget(maxPageBytes),
          );
          return pageParts('{"messages":[', page.messages, `],"next_after":${page.nextAfter}}`);
        }),
    }),
    route({
      method: 'GET',
      path: '/v1/dead-letters',
      who: 'overseer',
      handler: ({ ctx, query, res }) =>
        paged(ctx.agent, res, async () => {
          const limit = limitParam(query);
          const after = afterParam(query);
          const filter = deadLetterFilter(
            textParams(query, ['reason', 'recipient', 'channel', 'q']),
          );
          const rows = await delivery.deadLetters(after, limit, pageBudget(maxPageBytes), filter);
          // as for replay: the `after` of the next page, null once a page is empty
          const next = rows.length === 0 ? null : deadLetterIdOf(rows[rows.length - 1]!);
          return pageParts('{"dead_letters":[', rows, `],"next_after":${next}}`);
        }),
    }),
    route({
      method: 'POST',
      path: '/v1/dead-letters/:id/replay',
      who: 'overseer',
      handler: async ({ ctx, params }) => {
        const id = Number(params.id);
        if (!/^\d+$/.test(params.id!))
          throw new GatewayError('not_found', `no endpoint for dead letter "${params.id}"`);
        const r = await delivery.replayDeadLetter(id, ctx.agent);
        if (r === undefined) throw new GatewayError('unknown_dead_letter', `no dead letter ${id}`);
        // audited in its commit when it replayed (rules/operators.ts actAudit)
        return { status: r.replayed ? 201 : 200, body: r };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/dead-letters/redrive',
      who: 'operator',
      body: { limit: REDRIVE_BODY_LIMIT, parse: parseRedrive },
      handler: async ({ ctx, body }) => {
        const made = await d.acts.redrive(ctx.agent, body.selection, body.rate);
        return { status: 202, body: made };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/redrives/:id',
      who: 'operator',
      handler: async ({ params }) => {
        assertRedriveId(params.id!);
        return { body: await d.acts.progress(params.id!) };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/agents/:id/pause',
      who: 'operator',
      handler: ({ ctx, params }) => pauseRoute(ctx, params.id!, false),
    }),
    route({
      method: 'POST',
      path: '/v1/agents/:id/resume',
      who: 'operator',
      handler: ({ ctx, params }) => pauseRoute(ctx, params.id!, true),
    }),
    route({
      method: 'GET',
      path: '/v1/audit',
      who: 'operator',
      handler: async ({ query }) => {
        const entries = await write.store.audit(afterParam(query), limitParam(query));
        const next = entries.length === 0 ? null : entries[entries.length - 1]!.seq;
        return { body: { entries, next_after: next } };
      },
    }),
  ];
}

/**
 * The console's page and files: same-origin only (CSP), never framed, never cached stale, no
 * cookie. The console's script talks to the JSON API with the bearer token it keeps in the tab.
 */
const CONSOLE_HEADERS = {
  'content-security-policy':
    "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
} as const;

function consoleAnswer(res: ServerResponse, a: ConsoleAsset): undefined {
  res.writeHead(200, { ...CONSOLE_HEADERS, 'content-type': a.contentType });
  res.end(a.body);
  return undefined;
}

/** An ack's answer as the opening members of a JSON object: `{"acked":[..],...`. */
function ackFields(a: { acked: unknown; dead_lettered: unknown; unknown: unknown }): string {
  return JSON.stringify(a).slice(0, -1);
}
