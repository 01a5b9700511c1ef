/**
 * The delivery rules both engines run (docs/design/delivery.md), pure: the configuration and
 * counters a store starts with, whose deliveries an agent may touch, how the ids of an ack, a
 * nack or an extension sort into what is done and what is answered, and when a failed attempt
 * is retried. The engines read the rows and write what these decide, each in its own
 * transaction; nothing here reads or writes storage.
 */
import { GatewayError } from '../../protocol/errors.js';
import {
  DEFAULT_DELIVERY,
  type DeliveryConfig,
  DeliveryState,
  type DeliveryStats,
  type OpResults,
} from '../store.js';
import {
  admission,
  admissionNeedsHoldings,
  type Depth,
  fullQueue,
  type Holding,
} from './queue-shares.js';

/** A store's delivery settings, every default filled in (deliveryConfig). */
export type DeliverySettings = Required<DeliveryConfig>;

/** A deliveries row as the rules read it (both engines select these columns). */
export interface DeliveryRow {
  id: number;
  message: number;
  recipient: string;
  state: DeliveryState;
  attempt: number;
  priority: number;
  lease_expires_at?: number | null;
  /** Its deadline, ms (docs/design/time.md); null or absent: none. */
  expires_at?: number | null;
  /** Its message's kind and message_id (null: the message is gone), for the alert it raises. */
  kind?: string | null;
  message_id?: string | null;
}

/**
 * The delivery settings a store runs with: the defaults, a 30 s alert window (one alert per
 * subject and reason a window: docs/design/delivery.md), Math.random for the retry jitter, no
 * alerts_to, then what the caller gave.
 */
export function deliveryConfig(given: Partial<DeliveryConfig> = {}): Required<DeliveryConfig> {
  return {
    ...DEFAULT_DELIVERY,
    alertWindowMs: 30_000,
    random: Math.random,
    alertsTo: '',
    ...given,
  };
}

/** A store's counters at open: all zero. */
export function newStats(): DeliveryStats {
  return {
    enqueued: 0,
    handedOut: 0,
    redelivered: 0,
    acked: 0,
    deadLetters: {
      lease_expired: 0,
      nacked: 0,
      rejected: 0,
      evicted: 0,
      queue_full: 0,
      integrity: 0,
      expired: 0,
    },
    alerts: 0,
  };
}

/** A copy of the counters, to put back when a transaction rolls back. */
export function statsCopy(s: DeliveryStats): DeliveryStats {
  return { ...s, deadLetters: { ...s.deadLetters } };
}

/**
 * The agent's own rows of `ids` (found: the rows read for them, by id). Another agent's is
 * undefined, as an unknown id is: a 403 for it told any agent which ids other agents held; now
 * it is `unknown` in an ack or nack, `not_leased` in an extension, and nothing of it changes.
 */
export function ownRows<R extends { recipient: string }>(
  agent: string,
  ids: readonly number[],
  found: (id: number, i: number) => R | undefined,
): (R | undefined)[] {
  return ids.map((id, i) => {
    const r = found(id, i);
    return r?.recipient === agent ? r : undefined;
  });
}

/**
 * An ack's answer and the rows it acks. An ack after the lease expired is still taken while
 * the delivery waits for its retry (the work was done; the retry would only repeat it); an
 * acked one is answered acked again and written once. An id given twice in one request is
 * answered twice and acted on once: the queue's depth falls by one.
 */
export function sortAcks<R extends DeliveryRow>(
  ids: readonly number[],
  rows: readonly (R | undefined)[],
): { answer: OpResults['ack']; toAck: R[] } {
  const answer: OpResults['ack'] = { acked: [], dead: [], unknown: [] };
  const toAck: R[] = [];
  const seen = new Set<number>();
  rows.forEach((r, i) => {
    const id = ids[i]!;
    if (r === undefined) answer.unknown.push(id);
    else if (r.state === DeliveryState.deadLetter) answer.dead.push(id);
    else {
      if (r.state !== DeliveryState.acked && !seen.has(id)) toAck.push(r);
      seen.add(id);
      answer.acked.push(id);
    }
  });
  return { answer, toAck };
}

/**
 * A nack's answer and the rows it fails: only a leased delivery is nacked; any other is
 * ignored, and so is an id given again in the same request (the first took its lease: one
 * failed attempt, or one dead letter with `retry: false`).
 */
export function sortNacks<R extends DeliveryRow>(
  ids: readonly number[],
  rows: readonly (R | undefined)[],
): { answer: OpResults['nack']; toNack: R[] } {
  const answer: OpResults['nack'] = { nacked: [], ignored: [], unknown: [] };
  const toNack: R[] = [];
  const done = new Set<number>();
  rows.forEach((r, i) => {
    const id = ids[i]!;
    if (r === undefined) answer.unknown.push(id);
    else if (r.state !== DeliveryState.leased || done.has(id)) answer.ignored.push(id);
    else {
      done.add(id);
      toNack.push(r);
      answer.nacked.push(id);
    }
  });
  return { answer, toNack };
}

/**
 * An extension is checked whole before anything is written: one not leased to the agent now
 * (acked, expired, dead-lettered, unknown, another agent's) is 409 `not_leased`. Returns when
 * each lease then ends, and the answer.
 */
export function extension(
  agent: string,
  ids: readonly number[],
  rows: readonly (DeliveryRow | undefined)[],
  extendMs: number,
  now: number,
): { expires: number; answer: OpResults['extend'] } {
  const leased = (r: DeliveryRow | undefined) =>
    r?.state === DeliveryState.leased && (r.lease_expires_at ?? 0) > now;
  const gone = ids.find((_, i) => !leased(rows[i]));
  if (gone !== undefined) {
    throw new GatewayError('not_leased', `delivery ${gone} is not leased to ${agent} any more`, {
      field: 'delivery_ids',
    });
  }
  const expires = now + extendMs;
  const at = new Date(expires).toISOString();
  return { expires, answer: ids.map((id) => ({ delivery_id: id, lease_expires_at: at })) };
}

/**
 * After a failed attempt (`attempt` is its number): 'dead' once the retries are used up, else
 * when it is ready again: base × 2^(attempt−1) with ±25% jitter, ~1 s, 2 s, 4 s at the defaults.
 */
export function retryAt(
  attempt: number,
  now: number,
  cfg: Pick<Required<DeliveryConfig>, 'maxRetries' | 'retryBaseMs' | 'random'>,
): number | 'dead' {
  if (attempt >= 1 + cfg.maxRetries) return 'dead';
  const jitter = 0.75 + 0.5 * cfg.random();
  return now + Math.round(cfg.retryBaseMs * 2 ** (attempt - 1) * jitter);
}

/**
 * The rules above, admission (queue-shares.ts) and the retry schedule with a store's settings:
 * what an engine's deliveries call.
 */
export class DeliveryRules {
  constructor(readonly cfg: Required<DeliveryConfig>) {}

  get leaseMs(): number {
    return this.cfg.leaseMs;
  }

  needsHoldings(depth: Depth, priority: number, sender: string | undefined): boolean {
    return admissionNeedsHoldings(depth, priority, sender, this.cfg);
  }

  admission(depth: Depth, priority: number, sender: string | undefined, holdings?: Holding[]) {
    return admission(depth, priority, sender, this.cfg, holdings);
  }

  fullQueue(victimFound: boolean, priority: number, quiet: boolean) {
    return fullQueue(victimFound, priority, quiet);
  }

  retryAt(attempt: number, now: number): number | 'dead' {
    return retryAt(attempt, now, this.cfg);
  }

  readonly own = ownRows;
  readonly sortAcks = sortAcks;
  readonly sortNacks = sortNacks;
  readonly extension = extension;
}
