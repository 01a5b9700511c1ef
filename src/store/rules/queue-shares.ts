/**
 * Fairness between the senders of one recipient's queue: pure rules, called by both stores
 * (sqlite/sqlite-deliveries.ts, postgres/pg-deliveries.ts through rules/deliveries.ts
 * DeliveryRules), which keep only the SQL that reads the holdings and the victim.
 *
 * - A full queue evicts the oldest normal pending copy of the sender that holds the most of it,
 *   counting the new copy's own sender with the new copy: a flood evicts its own messages first,
 *   and a sender holding no more than its fair part (capacity / senders present) never loses one
 *   to another's flood.
 * - Critical copies are never evicted, so their bound is shared out ahead of time: each agent may
 *   hold at most criticalShare() of a recipient's critical capacity; past it its own new critical
 *   copy is dead-lettered (queue_full), never another sender's. The adapter's own alerts are not
 *   counted against the agents' capacity: they have a reserve of their own on top of it, so no
 *   agent's flood can crowd one out.
 */
import { ADAPTER_SENDER } from '../../protocol/envelope.js';
import type { DeliveryConfig } from '../store.js';

/** One sender's part of a recipient's open deliveries (pending plus leased). */
export interface Holding {
  readonly sender: string;
  /** Open deliveries of this sender, critical ones included. */
  readonly open: number;
  /** How many of them are critical. */
  readonly critical: number;
  /** How many may be evicted: normal and pending (not leased). */
  readonly evictable: number;
}

/**
 * Whose oldest normal pending delivery a full queue gives up for a new copy from `incoming`:
 * of the senders holding at least their fair part (the queue's open copies, the new one
 * counted, over the senders present), the one holding the most that has a copy to evict; ties go
 * to the new copy's own sender, then to the name, so both stores choose alike. Undefined: no such
 * sender has one (all leased or critical); the store then refuses a normal copy (queue_full) or
 * takes a critical one above the bound, as before.
 *
 * The largest holder always holds at least the fair part, and more than capacity / senders: the
 * holdings sum to more than the capacity once the new copy is counted. So a sender holding no
 * more than capacity / senders never loses a copy while another holds more.
 */
export function evictionSender(holdings: readonly Holding[], incoming: string): string | undefined {
  const counted = new Map(holdings.map((h) => [h.sender, { ...h }]));
  const own = counted.get(incoming);
  if (own === undefined)
    counted.set(incoming, { sender: incoming, open: 1, critical: 0, evictable: 0 });
  else own.open++;
  const all = [...counted.values()];
  const total = all.reduce((n, h) => n + h.open, 0);
  const candidates = all
    .filter((h) => h.open * all.length >= total && h.evictable > 0)
    .sort(
      (a, b) =>
        b.open - a.open ||
        Number(b.sender === incoming) - Number(a.sender === incoming) ||
        (a.sender < b.sender ? -1 : a.sender > b.sender ? 1 : 0),
    );
  return candidates[0]?.sender;
}

/**
 * The adapter's own room on top of a recipient's critical capacity: alerts are aggregated (at
 * most one per subject and reason every 30 s), so a tenth of the capacity, at least 10, holds
 * hours of them while alerts_to is away. Default capacity 5,000: 500.
 */
export function alertReserve(criticalCapacity: number): number {
  return Math.max(10, Math.ceil(criticalCapacity / 10));
}

/**
 * The critical copies one agent may hold in one recipient's queue: its equal part of the
 * capacity among the topology's `agents`, at least 1. The parts add up to no more than the
 * capacity, so an agent within its part always finds room. Default 5,000 over 6 agents: 833.
 */
export function criticalShare(criticalCapacity: number, agents: number): number {
  return Math.max(1, Math.floor(criticalCapacity / Math.max(1, agents)));
}

/** What a store knows of a recipient's critical copies when a new one comes. */
export interface CriticalCounts {
  /** Open critical deliveries of the recipient, the adapter's included. */
  readonly total: number;
  /** How many the new copy's sender holds (undefined: not read, because total < its share). */
  readonly sender?: number;
  /** How many are the adapter's alerts (undefined: not read). */
  readonly adapter?: number;
}

/**
 * Whether a new critical copy from `sender` is taken, or dead-lettered at once (queue_full):
 * `needs` says which counts the store must read first (none while the total is below the
 * sender's share, the common case, so the send path reads nothing more).
 */
export function admitCritical(
  sender: string | undefined,
  counts: CriticalCounts,
  criticalCapacity: number,
  agents: number,
): 'admit' | 'refuse' | 'needs-counts' {
  if (sender === ADAPTER_SENDER) {
    return counts.total < criticalCapacity + alertReserve(criticalCapacity) ? 'admit' : 'refuse';
  }
  // an operator's replay of a dead letter (no sender): the bound alone, as it always was
  if (sender === undefined) return counts.total < criticalCapacity ? 'admit' : 'refuse';
  const share = criticalShare(criticalCapacity, agents);
  if (counts.total < share) return 'admit';
  if (counts.sender === undefined || counts.adapter === undefined) return 'needs-counts';
  if (counts.sender >= share) return 'refuse';
  return counts.total - counts.adapter < criticalCapacity ? 'admit' : 'refuse';
}

/** A recipient's open deliveries, and how many of them are critical. */
export interface Depth {
  readonly all: number;
  readonly critical: number;
}

type Bounds = Pick<Required<DeliveryConfig>, 'capacity' | 'criticalCapacity' | 'agents'>;

/**
 * Whether admitting a copy needs the recipient's holdings read first: its queue is full (whose
 * copy to evict), or a critical copy's verdict needs its sender's and the adapter's counts.
 */
export function admissionNeedsHoldings(
  depth: Depth,
  priority: number,
  sender: string | undefined,
  cfg: Bounds,
): boolean {
  if (depth.all >= cfg.capacity) return true;
  if (priority === 0) return false;
  const verdict = admitCritical(
    sender,
    { total: depth.critical },
    cfg.criticalCapacity,
    cfg.agents,
  );
  return verdict === 'needs-counts';
}

/**
 * A new copy from `sender` (undefined: an operator's replay of a dead letter) to a queue of
 * `depth`: 'refuse' (dead at once, queue_full), 'admit', or, the queue being full, the sender
 * whose oldest normal pending copy to evict (undefined: none may be). Critical copies are never
 * evicted: the critical bound is all that keeps a flood of them from growing a queue without
 * end, and each sender's share of it keeps one sender's flood from taking the room of the
 * others (and of the adapter's alerts, which have their own). `holdings`: read when
 * admissionNeedsHoldings said so.
 */
export function admission(
  depth: Depth,
  priority: number,
  sender: string | undefined,
  cfg: Bounds,
  holdings: readonly Holding[] = [],
): 'refuse' | 'admit' | { readonly evictFrom: string | undefined } {
  if (priority !== 0) {
    const of = (s: string) => holdings.find((h) => h.sender === s)?.critical ?? 0;
    let verdict = admitCritical(
      sender,
      { total: depth.critical },
      cfg.criticalCapacity,
      cfg.agents,
    );
    if (verdict === 'needs-counts') {
      const counts = { total: depth.critical, sender: of(sender!), adapter: of(ADAPTER_SENDER) };
      verdict = admitCritical(sender, counts, cfg.criticalCapacity, cfg.agents);
    }
    if (verdict !== 'admit') return 'refuse';
  }
  if (depth.all < cfg.capacity) return 'admit';
  return { evictFrom: evictionSender(holdings, sender ?? '') };
}

/**
 * A full queue, once the victim was looked for: evict it; else a normal copy is refused
 * (queue_full) and a critical one taken above the bound, with an overrun alert unless `quiet`
 * (the adapter's own alerts overrunning alerts_to's queue raise none, or one overrun would feed
 * the next).
 */
export function fullQueue(
  victimFound: boolean,
  priority: number,
  quiet: boolean,
): 'evict' | 'refuse' | 'overrun' | 'take' {
  if (victimFound) return 'evict';
  if (priority === 0) return 'refuse';
  return quiet ? 'take' : 'overrun';
}
