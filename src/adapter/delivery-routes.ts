/**
 * The delivery endpoints: the inbox, acks and nacks, heartbeat, and the alerts_to agent's view
 * of agents and dead letters.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseDeliveryIds } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import { expectMethod, intParam, readBody } from '../protocol/http.js';
import type { SqliteStore } from '../store/sqlite-store.js';
import { type DeliveryService, MAX_WAIT_S } from './delivery.js';
import type { GroupCommit } from './group-commit.js';
import type { Topology } from './topology.js';

/** Deliveries one poll hands out: default and most. */
const INBOX_DEFAULT_MAX = 10;
const INBOX_MAX = 100;
const IDS_BODY_LIMIT = 64 * 1024;
const REPLAY_PATH = /^\/v1\/dead-letters\/(\d+)\/replay$/;

export interface DeliveryRouteContext {
  readonly topology: Topology;
  readonly store: SqliteStore;
  readonly commits: GroupCommit;
  readonly delivery: DeliveryService;
  readonly now: () => number;
}

export type Answer = { status?: number; body: string | object } | undefined;

export function deliveryRoutes(ctx: DeliveryRouteContext) {
  const { topology, store, commits, delivery, now } = ctx;
  const alertsOnly = (agent: string) => {
    if (agent !== topology.alertsTo) {
      throw new GatewayError(
        'not_alerts_agent',
        `only ${topology.alertsTo} (alerts_to) may do this`,
      );
    }
  };

  return async (
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    query: () => URLSearchParams,
    agent: string,
  ): Promise<Answer> => {
    switch (path) {
      case '/v1/inbox': {
        expectMethod(req, 'GET');
        const params = query();
        const wait = intParam(params, 'wait', 0, 0, MAX_WAIT_S);
        const max = intParam(params, 'max', INBOX_DEFAULT_MAX, 1, INBOX_MAX);
        const closed = new Promise((resolve) => res.once('close', resolve));
        const got = await delivery.inbox(agent, wait, max, closed);
        return { body: `{"deliveries":[${got.join(',')}]}` };
      }
      case '/v1/acks': {
        expectMethod(req, 'POST');
        const r = await delivery.ack(agent, await deliveryIds(req));
        return { body: { acked: r.acked, dead_lettered: r.dead, unknown: r.unknown } };
      }
      case '/v1/nacks': {
        expectMethod(req, 'POST');
        return { body: await delivery.nack(agent, await deliveryIds(req)) };
      }
      case '/v1/heartbeat': {
        expectMethod(req, 'POST');
        return { body: await commits.run(() => store.heartbeat(agent, now())) };
      }
      case '/v1/agents': {
        expectMethod(req, 'GET');
        alertsOnly(agent);
        const agents = store.agents(topology.agents.keys()).map((a) => ({
          ...a,
          role: topology.agents.get(a.id)?.role ?? null,
        }));
        return { body: { agents } };
      }
      case '/v1/dead-letters': {
        expectMethod(req, 'GET');
        alertsOnly(agent);
        const params = query();
        const after = intParam(params, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
        const limit = intParam(params, 'limit', 100, 1, 1000);
        return { body: `{"dead_letters":[${store.deadLetters(after, limit).join(',')}]}` };
      }
    }
    const replay = REPLAY_PATH.exec(path);
    if (replay !== null) {
      expectMethod(req, 'POST');
      alertsOnly(agent);
      const id = Number(replay[1]);
      const r = await commits.run(() => store.replayDeadLetter(id, now()));
      if (r === undefined) throw new GatewayError('unknown_dead_letter', `no dead letter ${id}`);
      return { status: r.replayed ? 201 : 200, body: r };
    }
    return undefined;
  };
}

function deliveryIds(req: IncomingMessage): Promise<number[]> {
  return readBody(req, IDS_BODY_LIMIT).then((body) => parseDeliveryIds(body));
}
