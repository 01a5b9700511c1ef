/**
 * The Store: what the adapter needs of its storage, in the adapter's words. The adapter types
 * against this interface only; which store it gets is decided once, by openStore (open.ts),
 * from the composition root. test/store/conformance.ts holds every store to these promises.
 *
 * Writes come as a group of typed operations, committed together in one transaction (the group
 * commit, adapter/group-commit.ts): an append with its fan-out, a lease, an ack, a nack, a
 * sweep. What the group changed that the adapter must act on (polls to wake, alerts to raise,
 * a timer to re-arm) comes back with the results as one value, CommitEffects. Reads need no
 * transaction.
 */

import type { JourneyEvent } from '../protocol/agent-api.js';
import type { Assignment } from '../protocol/envelope.js';
import type { GatewayError } from '../protocol/errors.js';
import type { Priority } from '../protocol/priority.js';
import type { TraceContext } from '../protocol/trace-context.js';

/** The states of a delivery row (one per recipient of a message). */
export const DeliveryState = {
  /** Waiting: ready once its available_at has passed (at once, or after a retry's backoff). */
  pending: 0,
  /** Handed to its agent, waiting for the ack until its lease expires. */
  leased: 1,
  acked: 2,
  deadLetter: 3,
} as const;
export type DeliveryState = (typeof DeliveryState)[keyof typeof DeliveryState];

/** A validated, routed message on its way into the store. */
export interface MessageDraft {
  readonly sender: string;
  readonly idempotencyKey: string;
  /** SHA-256 of the canonical request body: same key, other body is a 409. */
  readonly fingerprint: Buffer;
  /** The channel the message travels in: a group channel, or '@agent' for a direct message. */
  readonly channel: string;
  readonly kind: string;
  readonly priority: Priority;
  /** reply_to_sequence_id: a sequence of `channel`, the message this one answers. */
  readonly replyTo: number | null;
  /** reply_to: the message_id of the message this one answers, in any channel. */
  readonly replyToId?: string | null;
  /**
   * Channels whose every message the sender may read (replay): its channels and its own
   * '@agent'. With what it sent and what it had a delivery of, the messages it may answer
   * (alerts_to may answer any). Left out: none.
   */
  readonly readable?: ReadonlySet<string>;
  /** The payload, already serialized: stored and served as these bytes. */
  readonly payloadJson: string;
  /** Receipt time, ms since the epoch: becomes timestamp_iso8601. */
  readonly receivedAt: number;
  /** Who gets a delivery row (the sender of a channel message is not among them). */
  readonly recipients: readonly string[];
  /** The W3C trace context of its creation, stored in its JSON and handed out with it. */
  readonly trace?: TraceContext;
  /**
   * Its deadline, ms since the epoch (expires_at, or ttl_ms from receipt or from deliverAt): a
   * copy not acked by then is never handed over again (docs/design/time.md). Undefined: none.
   */
  readonly expiresAt?: number;
  /**
   * When it is to be sent, ms since the epoch, when after receivedAt: stored in `scheduled`
   * and acknowledged with a null sequence, sent by the due timer's sweep. Undefined: now.
   */
  readonly deliverAt?: number;
  /**
   * Audited in the transaction that stores it (CONTRACT "Audit log"; rules/operators.ts
   * messageAudit): an operator's message ('message'), or the alerts_to agent's
   * ('continuation', entered only when it continues a thread). Undefined: not audited.
   */
  readonly audited?: 'message' | 'continuation';
}

export type AppendOutcome =
  | { readonly status: 201 | 200; readonly assignment: Assignment }
  | { readonly status: 'rejected'; readonly error: GatewayError };

/** Bounds, leases, retries and the alert recipient. */
export interface DeliveryConfig {
  /** Pending plus leased deliveries one agent may hold. Default 500. */
  readonly capacity: number;
  /**
   * Critical deliveries (pending plus leased) of agents one agent may hold; past it, or past
   * its sender's share of it, a new critical copy is dead-lettered at once (queue_full) with
   * its alert. Critical copies are never evicted, so without this bound any agent could grow
   * another's queue without end by marking a flood critical. The adapter's alerts have a
   * reserve of their own on top (queue-shares.ts alertReserve). Default 5,000: ten full normal
   * queues of escalations.
   */
  readonly criticalCapacity: number;
  /**
   * Agents of the topology: each may hold at most criticalCapacity / agents (at least 1) of one
   * recipient's critical deliveries (queue-shares.ts criticalShare). Default 1: one sender may
   * hold them all.
   */
  readonly agents?: number;
  /** How long a handed-out delivery waits for its ack, ms. Default 30,000. */
  readonly leaseMs: number;
  /** Redeliveries after the first, then dead-letter. Default 3. */
  readonly maxRetries: number;
  /** Backoff base, ms: attempt n waits base × 2^(n−1), ×0.75–1.25 jitter. Default 1,000. */
  readonly retryBaseMs: number;
  /** The agent alerts go to. */
  readonly alertsTo: string;
  /** At most one alert per (recipient, reason) in this window, ms. Default 30,000. */
  readonly alertWindowMs?: number;
  /** For jitter; tests pass a fixed one. */
  readonly random?: () => number;
}

export const DEFAULT_DELIVERY: Omit<
  Required<DeliveryConfig>,
  'alertsTo' | 'alertWindowMs' | 'random'
> = {
  capacity: 500,
  criticalCapacity: 5000,
  agents: 1,
  leaseMs: 30_000,
  maxRetries: 3,
  retryBaseMs: 1000,
};

/**
 * The budgets of a thread (docs/reference/adapter-api.md, "Threads and budgets";
 * docs/design/threads.md), kept in the transaction that stores a reply, so no race of concurrent
 * replies passes one.
 */
export interface ThreadBudgets {
  /** The deepest reply chain: a message whose hop would pass it is refused. Default 8. */
  readonly hops: number;
  /** Messages of agents in a thread since its last continuation, the root counted. Default 16. */
  readonly messages: number;
}

/** The defaults (docs/reference/configuration.md, AGW_*_BUDGET): 16 peer messages or 8 hops. */
export const DEFAULT_BUDGETS: ThreadBudgets = { hops: 8, messages: 16 };

/**
 * Why a delivery went to the dead letters. `integrity`: its message failed its checksum when it
 * was to be handed out, so it is quarantined: never served, and its channel released.
 */
export type DeadLetterReason =
  | 'lease_expired'
  | 'nacked'
  | 'rejected'
  | 'evicted'
  | 'queue_full'
  | 'integrity'
  | 'expired';
/**
 * Why an alert went to alerts_to. Besides the dead letters: `critical_overrun`;
 * `checksum_mismatch`, a corrupt message met by a read that hands nothing out (replay, dead
 * letters, message status), `recipient` naming its channel; `storage_full`, new messages of
 * `recipient` (a sender) refused by a storage bound; `write_failures`, commits that kept failing
 * on the storage itself (`recipient` "adapter"), written once writes work again;
 * `hop_budget_exceeded` and `thread_budget_exceeded`, replies refused by a thread's budget
 * (`recipient` naming the sender refused: alert/budget, aggregated per sender);
 * `audit_chain`, the audit log's hash chain found broken at start (`recipient` "audit_log",
 * `message_ids` the first break as `audit:<seq>:<kind>`, adapter/audit-check.ts).
 */
export type AlertReason =
  | DeadLetterReason
  | 'critical_overrun'
  | 'checksum_mismatch'
  | 'storage_full'
  | 'write_failures'
  | 'audit_chain'
  | BudgetReason;

/** The kind of alert message each reason is told as (docs/design/delivery.md, "Alerts"). */
export const ALERT_KIND: Readonly<Record<AlertReason, SentAlert['kind']>> = {
  lease_expired: 'alert/dead-letter',
  nacked: 'alert/dead-letter',
  rejected: 'alert/dead-letter',
  evicted: 'alert/dead-letter',
  queue_full: 'alert/dead-letter',
  expired: 'alert/dead-letter',
  integrity: 'alert/integrity',
  critical_overrun: 'alert/overrun',
  checksum_mismatch: 'alert/integrity',
  audit_chain: 'alert/integrity',
  storage_full: 'alert/storage',
  write_failures: 'alert/storage',
  hop_budget_exceeded: 'alert/budget',
  thread_budget_exceeded: 'alert/budget',
};

/** Why a reply was refused by its thread's budget: the error code and the alert's reason. */
export type BudgetReason = 'hop_budget_exceeded' | 'thread_budget_exceeded';

/**
 * Bounds on what the store holds, checked before a new message of an agent is written (alerts,
 * replays and every other write pass: they are small, and retention must run when full). Past
 * any of them the message is refused with 503 `storage_full` and Retry-After, and nothing of it
 * is stored.
 */
export interface StorageLimits {
  /** Bytes the store may use (AGW_MAX_STORE_BYTES). Default 4 GiB: 80% of the 5 GiB volume. */
  readonly maxBytes: number;
  /**
   * The part of maxBytes one sender's messages may use, 0 to 1 (AGW_SENDER_SHARE_PERCENT / 100).
   * Default 0.5: one agent in a loop cannot fill the store alone. The adapter's default (`auto`)
   * scales with its topology: senderShareFor(agents).
   */
  readonly senderShare: number;
  /**
   * Bytes kept free on the store's volume (AGW_MIN_FREE_BYTES): the room the WAL, checkpoints,
   * alerts and retention need to go on. Default 256 MiB. 0: not checked.
   */
  readonly reserveBytes: number;
}

export const DEFAULT_STORAGE: StorageLimits = {
  maxBytes: 4 * 1024 ** 3,
  senderShare: 0.5,
  reserveBytes: 256 * 1024 ** 2,
};

/**
 * The default share of the store one sender may use, for a topology of `agents`:
 * twice an equal part, at most a half and at least 1%. Twice, because agents do not send alike
 * (a pm or an orchestrator writes more than a researcher), and an equal part would refuse the
 * busy ones while the store is mostly empty; so it takes about half the agents, not two, to fill
 * the store. 2 agents: 50%; the seed's 6: 33%; 20: 10%; 200 or more: 1% (41 MiB of 4 GiB).
 */
export function senderShareFor(agents: number): number {
  return Math.min(0.5, Math.max(2 / Math.max(1, agents), 0.01));
}

/** What the store uses now, as its bounds see it. */
export interface StorageUse {
  /** Bytes the store uses (SQLite: pages in use × page size, free pages of the file not counted). */
  readonly usedBytes: number;
  /** Free bytes of the store's volume, as last measured (plus free pages inside the file). */
  readonly availableBytes: number;
  /** Each sender's stored messages, bytes, as counted against its share. */
  readonly senders: Readonly<Record<string, number>>;
}

/**
 * Thrown by commit when the storage itself failed (disk full, an I/O error, a broken file), not
 * the group's content: the group rolled back as with any error. The adapter counts these to
 * tell a failing disk (/health 503, a CRIT entry) from a bad request. `cause` is the engine's
 * error.
 */
export class StorageFailure extends Error {
  override name = 'StorageFailure';
}

/** The payload of an alert message to alerts_to (docs/design/delivery.md, "Alerts"). */
export interface AlertPayload {
  readonly reason: string;
  readonly recipient: string;
  readonly count: number;
  readonly message_ids: readonly string[];
  readonly attempts: number;
}

/**
 * The payload of alert/budget (docs/reference/adapter-api.md, "Threads and budgets"): replies of
 * `sender` refused since the last alert about it, `thread_id` the thread of the latest (aggregated
 * per sender). The refused messages were never stored, so have no id: `message_ids` lists the
 * messages they replied to (up to 20), in every thread counted.
 */
export interface BudgetAlertPayload {
  readonly reason: BudgetReason;
  readonly thread_id: string;
  readonly sender: string;
  readonly count: number;
  readonly message_ids: readonly string[];
}

/** An alert the store wrote to alerts_to as a message. */
export type SentAlert =
  | {
      readonly kind: 'alert/dead-letter' | 'alert/integrity' | 'alert/overrun' | 'alert/storage';
      readonly payload: AlertPayload;
    }
  | { readonly kind: 'alert/budget'; readonly payload: BudgetAlertPayload };

/** Counters the metrics read, since the store opened. */
export interface DeliveryStats {
  enqueued: number;
  handedOut: number;
  redelivered: number;
  acked: number;
  deadLetters: Record<DeadLetterReason, number>;
  alerts: number;
}

/** One JSON object per delivery, ready to send, as the inbox answers it. */
export type DeliveryJson = string;

/** One write of a group. */
export type StoreOp =
  | { readonly op: 'append'; readonly drafts: readonly MessageDraft[] }
  /**
   * Hands out up to `max` ready deliveries of `agent` (critical channels first, sequence order),
   * and with `maxBytes` no more than fit in it, counted as for channelMessages (the first
   * always): what is not handed out is not leased.
   */
  | {
      readonly op: 'lease';
      readonly agent: string;
      readonly max: number;
      readonly now: number;
      readonly maxBytes?: number;
    }
  | {
      readonly op: 'ack';
      readonly agent: string;
      readonly ids: readonly number[];
      /** When, for the acks' journey events; default the store's clock. */
      readonly now?: number;
    }
  /** A failed attempt; with `retry` false, dead-lettered at once (`rejected`, `reason` kept). */
  | {
      readonly op: 'nack';
      readonly agent: string;
      readonly ids: readonly number[];
      readonly now: number;
      readonly retry?: boolean;
      readonly reason?: string | null;
    }
  /** Each of these leases of `agent` ends `extendMs` from now; all must still be leased. */
  | {
      readonly op: 'extend';
      readonly agent: string;
      readonly ids: readonly number[];
      readonly extendMs: number;
      readonly now: number;
    }
  | { readonly op: 'heartbeat'; readonly agent: string; readonly now: number }
  /** Expired leases become failed attempts; alerts whose window has passed go out. */
  | { readonly op: 'sweep'; readonly now: number }
  /** A fresh delivery for a dead letter; a second replay returns the first one's delivery. */
  | {
      readonly op: 'replay_dead_letter';
      readonly id: number;
      readonly now: number;
      /** Who replayed it (its `redriven` event says), when known. */
      readonly by?: string;
      /** Audited in its transaction when it replays (rules/operators.ts actAudit). */
      readonly audited?: boolean;
    }
  /**
   * Raises (or counts `count`, default 1, towards) an aggregated alert about `recipient`;
   * `messageId`, when given, is listed in it.
   */
  | {
      readonly op: 'alert';
      readonly recipient: string;
      readonly reason: AlertReason;
      readonly messageId?: string;
      readonly count?: number;
      readonly now: number;
    }
  /**
   * Pauses or resumes `agent`'s deliveries (operators, docs/design/operators.md): while paused a
   * lease of it hands out nothing. `by` is who did it (`operator:<id>`). Durable; a repeat
   * changes nothing (`changed` false). A resume wakes the agent's polls (effects.woken).
   */
  | {
      readonly op: 'pause' | 'resume';
      readonly agent: string;
      readonly by: string;
      readonly now: number;
      /** Audited in its transaction (rules/operators.ts actAudit). */
      readonly audited?: boolean;
    }
  /**
   * A bulk redrive of dead letters: the selection (ids, or a filter), the dead letters existing
   * now (up to the highest id), and how many match (`total`). Nothing is replayed yet: steps do.
   */
  | {
      readonly op: 'redrive_create';
      /** `rd_` and 16 to 32 hex digits, made by the caller (rules/operators.ts newRedriveId). */
      readonly id: string;
      readonly by: string;
      readonly selection: RedriveSelection;
      readonly rate: number;
      readonly now: number;
      /** Audited in its transaction (rules/operators.ts actAudit). */
      readonly audited?: boolean;
    }
  /**
   * Replays up to `max` more dead letters of redrive `id`, in message order (each channel's
   * sequence order) after its cursor, and moves the cursor and counts in the same commit. One
   * already replayed is counted skipped. The last step marks it done.
   */
  | { readonly op: 'redrive_step'; readonly id: string; readonly max: number; readonly now: number }
  /** Appends an entry to the audit log (hash-chained, rules/operators.ts auditEntry). */
  | { readonly op: 'audit'; readonly entry: AuditDraft }
  /**
   * Deletes up to `limit` audit entries from the oldest end: those before the first entry at or
   * after `before` (ms), never the newest (the chain goes on from it). The first kept entry's
   * prev_hash is the anchor verification starts from (rules/audit-chain.ts).
   */
  | { readonly op: 'prune_audit'; readonly before: number; readonly limit: number }
  /**
   * Cancels a scheduled message of `sender` before it fires. Refused: 404 not_found (no such
   * message), 403 not_your_message (another's), 409 already_sent (it fired). A repeat of a
   * cancel answers as the first.
   */
  | {
      readonly op: 'cancel_scheduled';
      readonly sender: string;
      readonly messageId: string;
      readonly now: number;
      /** Audited in its transaction when it cancels (rules/operators.ts actAudit). */
      readonly audited?: boolean;
    }
  /**
   * An ask's reply (docs/design/time.md, "Asking"): the first copy held by `agent`, by delivery
   * id, of a message whose reply_to is `messageId`. Pending: leased to `agent` now; leased: its
   * lease renewed; acked or dead-lettered: as it is. 404 not_found when `messageId` is not a
   * message `agent` sent.
   */
  | {
      readonly op: 'take_reply';
      readonly agent: string;
      readonly messageId: string;
      readonly now: number;
    }
  /** Up to `limit` messages received before `before`, except kinds in `keep` and undelivered. */
  | {
      readonly op: 'prune';
      readonly before: number;
      readonly keep: readonly string[];
      readonly limit: number;
    };

/** What each operation answers. */
export interface OpResults {
  append: AppendOutcome[];
  lease: DeliveryJson[];
  /** Acked (again, harmlessly, if already acked), gone to the dead letters before, unknown. */
  ack: { acked: number[]; dead: number[]; unknown: number[] };
  /** Nacked; not leased (ignored); unknown. */
  nack: { nacked: number[]; ignored: number[]; unknown: number[] };
  extend: { delivery_id: number; lease_expires_at: string }[];
  heartbeat: { pending: number; critical_pending: number };
  sweep: undefined;
  replay_dead_letter: { delivery_id: number; replayed: boolean } | undefined;
  alert: undefined;
  /** How many messages went. */
  prune: number;
  /** How many audit entries went. */
  prune_audit: number;
  pause: PauseAnswer;
  resume: PauseAnswer;
  /** How many dead letters the redrive takes. */
  redrive_create: { redrive_id: string; count: number };
  /** Its progress after the step; undefined: no such redrive. */
  redrive_step: RedriveState | undefined;
  audit: AuditEntry;
  /** `changed`: false for a repeat of a cancel (nothing changed). */
  cancel_scheduled: { cancelled: true; changed: boolean };
  /** The reply as the inbox hands a delivery out, plus its `state`; undefined: none yet. */
  take_reply: DeliveryJson | undefined;
}

/** The detail of a copy's `redriven` event: its dead letter, who, and by which redrive. */
export interface RedriveDetail {
  readonly dead_letter: number;
  readonly by?: string;
  readonly redrive?: string;
}

/** An agent's pause after a pause or resume; `changed` false when it was so already. */
export interface PauseAnswer {
  readonly paused: { readonly since: number; readonly by: string } | null;
  readonly changed: boolean;
}

/** Which dead letters (open ones: not replayed yet); all given fields must match. */
export interface DeadLetterFilter {
  readonly reason?: string;
  readonly recipient?: string;
  readonly channel?: string;
  /** Full text over the message's payload text and kind (searchMessages' `q`). */
  readonly q?: string;
}

/** What a redrive takes: these dead letter ids, or those matching a filter. */
export type RedriveSelection =
  | { readonly ids: readonly number[] }
  | { readonly filter: DeadLetterFilter };

export interface RedriveState {
  readonly redrive_id: string;
  readonly total: number;
  readonly done: number;
  readonly skipped: number;
  readonly state: 'running' | 'done';
  readonly rate: number;
  readonly by: string;
  readonly created_at: string;
}

/** An entry to append to the audit log; the store gives it its seq and hashes. */
export interface AuditDraft {
  readonly at: number;
  /** An agent's id, `operator:<id>`, or `adapter`. */
  readonly actor: string;
  readonly action: string;
  readonly target: string;
  readonly detail: Readonly<Record<string, unknown>>;
}

/**
 * The audit log's anchor (rules/audit-chain.ts): what the store keeps beside the log (table
 * audit_anchor, one row), written in the same transaction as every append and every prune, so
 * it always says where the log's two ends are.
 */
export interface AuditAnchor {
  /** The newest entry appended: its seq and hash (0 and GENESIS_HASH: none yet). */
  readonly seq: number;
  readonly hash: string;
  /**
   * The highest seq retention pruned (0: none) and that entry's hash: what the first kept
   * entry holds as prev_hash (GENESIS_HASH when nothing was pruned).
   */
  readonly prunedSeq: number;
  readonly prunedHash: string;
}

export interface AuditEntry {
  readonly seq: number;
  readonly at: string;
  readonly actor: string;
  readonly action: string;
  readonly target: string;
  readonly detail: Readonly<Record<string, unknown>>;
  readonly prev_hash: string;
  readonly hash: string;
}

/** A message search (GET /v1/messages): newest first; `after` 0 or a page's nextAfter. */
export interface MessageQuery {
  readonly q?: string;
  readonly channel?: string;
  readonly sender?: string;
  readonly kind?: string;
  readonly after: number;
  readonly limit: number;
}
export type OpResult<O extends StoreOp> = OpResults[O['op']];

/** One operation's outcome: its result, or the GatewayError that refused it alone. */
export type Settled = { readonly ok: unknown } | { readonly err: GatewayError };

/** What a committed group changed that the adapter must act on. */
export interface CommitEffects {
  /** Alerts written to alerts_to in the group: the adapter raises them on journald too. */
  readonly alerts: readonly SentAlert[];
  /** Agents given new deliveries: their waiting polls wake. */
  readonly woken: ReadonlySet<string>;
  /** Something may now fall due sooner than before (a lease, a retry, an alert window). */
  readonly timingChanged: boolean;
  /** Copies dead-lettered in the group, for the spans of tracing (none: left out). */
  readonly deadLettered?: readonly DeadLettered[];
}

/** A copy dead-lettered in a commit: its message, recipient, reason and attempts. */
export interface DeadLettered {
  readonly messageId: string;
  readonly recipient: string;
  readonly reason: DeadLetterReason;
  readonly attempt: number;
}

export interface Committed {
  /** One per operation, in order. */
  readonly results: readonly Settled[];
  readonly effects: CommitEffects;
}

export type DeliveryStateName = 'pending' | 'leased' | 'acked' | 'dead_letter';

/** What became of a message, for its sender: each recipient's delivery. */
export interface MessageStatus {
  /** The stored message, checksum verified, as readers see it; "null" if it fails its checksum. */
  readonly message: string;
  readonly sender: string;
  /** A scheduled message not yet sent: when it is due (ISO 8601); it has no recipients' rows. */
  readonly scheduled_for?: string;
  /** A scheduled message its sender cancelled: when (ISO 8601). */
  readonly cancelled_at?: string;
  /** A scheduled message's recipients to be, for its journey (`scheduled`). */
  readonly scheduledTo?: readonly string[];
  readonly recipients: readonly {
    readonly agent: string;
    readonly state: DeliveryStateName;
    readonly attempts: number;
    readonly reason: string | null;
    readonly note?: string;
  }[];
}

/**
 * A change of one delivery, as its journey tells it (docs/design/journey.md). A copy's `queued`
 * is its message's commit, never a row.
 */
export type DeliveryEvent = Exclude<JourneyEvent['event'], 'queued'>;

/** What the store keeps of a message's journey: each recipient's latest copy and the events. */
export interface JourneyRows {
  /** When the message was stored, ms: every copy's `queued`. */
  readonly acceptedAt: number;
  readonly copies: readonly JourneyCopy[];
  /** Every event of every copy of the message, oldest first. */
  readonly events: readonly {
    readonly recipient: string;
    readonly delivery: number;
    readonly at: number;
    readonly event: DeliveryEvent;
    readonly attempt: number;
    /** JSON, or null. */
    readonly detail: string | null;
  }[];
  /** The recipients' pauses and resumes since the message was accepted, oldest first. */
  readonly pauses?: readonly PauseEvent[];
  /** The recipients paused now: since when, by whom. */
  readonly pausedNow?: Readonly<Record<string, { readonly since: number; readonly by: string }>>;
}

/** One recipient's latest copy of a message, with what the journey needs around it. */
/** A pause or resume of an agent's deliveries, as journeys tell it. */
export interface PauseEvent {
  readonly agent: string;
  readonly at: number;
  readonly event: 'paused' | 'resumed';
  readonly by: string;
}

export interface JourneyCopy {
  readonly recipient: string;
  readonly delivery: number;
  readonly state: DeliveryStateName;
  readonly attempts: number;
  readonly availableAt: number;
  readonly leaseExpiresAt: number | null;
  readonly reason: string | null;
  readonly note: string | null;
  /** When it was dead-lettered, ms. */
  readonly deadAt: number | null;
  /** The recipient's last poll, ms; null: none the store has seen. */
  readonly lastPoll: number | null;
  /** The recipient's open deliveries (pending and leased), all channels. */
  readonly waiting: number;
  /** The first open copy of the same channel for the recipient, when it is another message's. */
  readonly head: {
    readonly messageId: string;
    readonly seq: number;
    readonly kind: string;
    readonly sender: string;
    readonly delivery: number;
    readonly state: DeliveryStateName;
    readonly attempts: number;
    readonly availableAt: number;
    readonly leaseExpiresAt: number | null;
    /** When it was last leased, ms. */
    readonly leasedAt: number | null;
  } | null;
}

/** A page of a thread: its messages' JSON, and the cursor after the last (null: empty page). */
export interface ThreadPage {
  readonly messages: string[];
  readonly nextAfter: number | null;
}

export interface AgentState {
  readonly id: string;
  readonly last_seen: string | null;
  /** Its last poll (journey's last_poll), ISO; null: never. */
  readonly last_poll: string | null;
  /** Pending and leased (queue_depth: the same, the older name). */
  readonly queue_depth: number;
  readonly critical_depth: number;
  /** Waiting to be handed out (or retried). */
  readonly pending: number;
  readonly critical_pending: number;
  readonly leased: number;
  /** Open dead letters of it (not replayed). */
  readonly dead_letters: number;
  readonly paused: boolean;
  readonly paused_since: string | null;
  readonly paused_by: string | null;
}

export interface Store {
  /**
   * Runs `ops` in order in one transaction (PostgreSQL: sweeps, pruning and the alerts that fell
   * due in transactions of their own right after it). When it resolves, the commit (and, at
   * sync=full, its fsync) is done, so callers may be answered. The caller runs one commit at a
   * time. An operation that refuses with a GatewayError
   * settles alone (operations refuse only before they write); any other error rolls the whole
   * group back, leaves nothing of it behind, and is thrown.
   */
  commit(ops: readonly StoreOp[]): Promise<Committed>;
  /** Creates the sequence counters of these channels (idempotent). */
  ensureChannels(names: Iterable<string>): Promise<void>;
  /**
   * Whether a message of `sender` with this idempotency key is stored (until retention prunes
   * it): a repeat, answered from the store as a duplicate (or a conflict) and storing nothing.
   * One indexed read; the adapter asks it before a sender's rate, so that a repeat takes no
   * token. Keys of a group not yet committed are not stored yet.
   */
  isStored(sender: string, idempotencyKey: string): Promise<boolean>;
  /** The message_id `sender` stored under `idempotencyKey`, if any (journeys by key). */
  messageIdOf(sender: string, idempotencyKey: string): Promise<string | undefined>;
  /**
   * Messages of a channel after `afterSeq`, in sequence order, checksums verified: one that
   * fails its checksum is skipped (never served; the next lease or sweep raises an
   * alert/integrity about it), and the page still holds `limit` messages when the channel has
   * them, so an empty page alone means the end. With `maxBytes`, the page ends before its
   * items would pass it, each counted as its UTF-8 bytes and PAGE_ITEM_OVERHEAD
   * (protocol/limits.ts), but holds at least the first: a reader goes on with `afterSeq` = the
   * last one's sequence.
   */
  channelMessages(
    channel: string,
    afterSeq: number,
    limit: number,
    maxBytes?: number,
  ): Promise<string[]>;
  /**
   * For the same page of a channel: the state of `reader`'s own delivery of each message it
   * had one of (its latest, after a replay), by message_id. The window skips what
   * channelMessages skipped, so the two agree when called in that order.
   */
  pageDeliveries(
    reader: string,
    channel: string,
    afterSeq: number,
    limit: number,
  ): Promise<Record<string, DeliveryStateName>>;
  /**
   * A message by its message_id with each recipient's latest delivery; undefined if unknown.
   * A message that fails its checksum is answered with `message` "null", never its bytes.
   */
  messageStatus(messageId: string): Promise<MessageStatus | undefined>;
  /** What the store keeps of a message's journey; undefined if the message is unknown. */
  journey(messageId: string): Promise<JourneyRows | undefined>;
  /**
   * Dead letters with id > `after`, oldest first, each with its message; `maxBytes` as above.
   * One whose message fails its checksum (an `integrity` dead letter) has `"message":null`.
   */
  deadLetters(
    after: number,
    limit: number,
    maxBytes?: number,
    filter?: DeadLetterFilter,
  ): Promise<string[]>;
  /**
   * Retained messages matching `query`, newest first (as replay shows them, checksums verified),
   * `maxBytes` as above; nextAfter is the cursor after the last (null: empty page).
   */
  searchMessages(query: MessageQuery, maxBytes?: number): Promise<ThreadPage>;
  /** A redrive's progress; undefined if unknown. */
  redrive(id: string): Promise<RedriveState | undefined>;
  /** The redrives still running (resumed at start). */
  runningRedrives(): Promise<string[]>;
  /** Each channel's last sequence number (0: none yet), by name. */
  lastSequences(): Promise<Record<string, number>>;
  /** Audit entries with seq > after, oldest first. */
  audit(after: number, limit: number): Promise<AuditEntry[]>;
  /**
   * The audit log's anchor (rules/audit-chain.ts): its newest entry and what retention pruned,
   * kept beside it in every append's and prune's transaction; undefined: its row is gone.
   */
  auditAnchor(): Promise<AuditAnchor | undefined>;
  /** Each agent's last heartbeat and queue depth. */
  agents(ids: Iterable<string>): Promise<AgentState[]>;
  /** Pending plus leased deliveries of an agent, and how many are critical. */
  depth(agent: string): Promise<{ all: number; critical: number }>;
  /**
   * When the agent's oldest pending delivery (the first to arrive of those waiting to be handed
   * out, or waiting out a retry's backoff) was ready: its available_at, ms; undefined when none
   * is pending. From indexes, a few µs: the stall check (adapter/stalls.ts) and /metrics ask it
   * per agent.
   */
  oldestPendingAt(agent: string): Promise<number | undefined>;
  /** The next moment something falls due: a lease expires, a retry is ready, an alert. */
  nextDue(now: number): Promise<number | undefined>;
  readonly stats: DeliveryStats;
  /** The store's use against its bounds (StorageLimits): for /metrics, logs and tests. */
  storageUse(): Promise<StorageUse>;
  /**
   * A page of a thread (thread_id), every channel's messages of it in commit order, checksums
   * verified (one that fails is skipped, as in channelMessages), `maxBytes` as there. `after`
   * is 0 or a page's `nextAfter`: a cursor of this store's own, opaque to readers. An unknown
   * thread is an empty page.
   */
  threadMessages(
    threadId: string,
    after: number,
    limit: number,
    maxBytes?: number,
  ): Promise<ThreadPage>;
  /** Checks the whole store; resolves with the problems found (none: []). */
  checkIntegrity(): Promise<string[]>;
  /**
   * Resolves when the store can serve: reachable, at the schema version this program knows.
   * Rejects with the reason otherwise (/health answers 503 with it). SQLite: always resolves.
   */
  ping(): Promise<void>;
  /**
   * Changes made by other adapters on the same store (replicas): `listener` is called with the
   * agents given new deliveries and whether timing changed, as a commit's effects would say.
   * A store that only one adapter uses never calls it.
   */
  watch(listener: (fx: ForeignEffects) => void): void;
  /**
   * How often, ms, a parked poll looks again by itself and the due-timer re-reads nextDue, in
   * case a change of another adapter was not announced (a lost notification). Undefined: never
   * (one adapter sees every change it makes).
   */
  readonly safetyPollMs?: number;
  /**
   * Which of `agents` have a delivery pending and ready at `now` (not waiting out a retry's
   * backoff, not past its deadline): a read, no lock. The safety poll wakes only their parked
   * polls (adapter/delivery.ts); a store without it has every parked poll look again. A superset
   * of the agents a lease would give something (a lane whose head is leased counts): an agent
   * named in vain looks again and parks, as every parked poll did at each safety poll before.
   */
  readyAmong?(agents: readonly string[], now: number): Promise<ReadonlySet<string>>;
  close(): Promise<void>;
}

/** What another adapter's commit changed, as far as this one must act on it. */
export interface ForeignEffects {
  readonly woken: ReadonlySet<string>;
  /** Every agent's polls should look again (too many to name, or changes may have been missed). */
  readonly everyone?: boolean;
  readonly timingChanged: boolean;
}
