/**
 * Where one copy of a message is now, in one word and one sentence (docs/design/journey.md, "The
 * causes"): a pure function of the copy, the copy that holds its lane, the recipient's last poll
 * and the time. Both stores read what it needs; nothing here is stored.
 */
import type { RecipientJourney as RecipientJourneyAnswer } from '../../protocol/agent-api.js';
import {
  type DeliveryEvent,
  DeliveryState,
  type JourneyCopy,
  type JourneyRows,
  type PauseEvent,
} from '../store.js';
import { STATE_NAME } from './stored-message.js';

export type JourneyCause = RecipientJourneyAnswer['cause'];

/** One copy as the journey reads it. Times are ms since the epoch. */
export interface CopyView {
  readonly agent: string;
  readonly state: 'pending' | 'leased' | 'acked' | 'dead_letter';
  /** Attempts made so far (leases handed out). */
  readonly attempts: number;
  /** The attempts a copy gets before it is dead-lettered (1 + AGW_MAX_RETRIES). */
  readonly maxAttempts: number;
  /** When a pending copy may be handed out (after a nack or an expired lease: the retry). */
  readonly availableAt: number;
  readonly leaseExpiresAt: number | null;
  /** When the current or last lease was handed out, if known (its event). */
  readonly leasedAt?: number | null;
  /** When it was acked or dead-lettered, if known (its event). */
  readonly finishedAt?: number | null;
  /** The dead letter's reason (store.ts DeadLetterReason) and the agent's note. */
  readonly reason?: string | null;
  readonly note?: string | null;
  /** How the last attempt ended, for a copy waiting for its retry. */
  readonly lastFailure?: { readonly nacked: boolean; readonly reason: string | null } | null;
  /** The recipient's last poll; null: never (since the store has kept it). */
  readonly lastPoll: number | null;
  /** Copies waiting for the recipient, this one included. */
  readonly waiting?: number;
  /** The recipient's deliveries are paused (by whom, since when). */
  readonly paused?: { readonly by: string; readonly since: number } | null;
  /** A scheduled message's time, while it is ahead. */
  readonly deliverAt?: number | null;
}

/** The earlier copy that holds this copy's lane (same channel, same recipient). */
export interface Blocker {
  readonly message_id: string;
  readonly channel_sequence_id: number;
  readonly kind: string;
  readonly sender: string;
  readonly copy: CopyView;
}

export interface CopyCause {
  readonly cause: JourneyCause;
  readonly explanation: string;
  readonly waiting_behind: {
    readonly message_id: string;
    readonly channel_sequence_id: number;
    readonly cause: JourneyCause;
  } | null;
}

/** The cause of `copy` at `now`; `blocker`: the lane's head when it is another copy. */
export function causeOf(copy: CopyView, blocker: Blocker | null, now: number): CopyCause {
  const own = ownCause(copy, now);
  if (own !== undefined || blocker === null) {
    return { ...(own ?? waitingForPoll(copy, now)), waiting_behind: null };
  }
  const head = causeOf(blocker.copy, null, now);
  const b = blocker.copy;
  const what = `#${blocker.channel_sequence_id} (${blocker.kind} from ${blocker.sender})`;
  let how: string;
  if (head.cause === 'leased') {
    const since = b.leasedAt == null ? '' : ` since ${when(b.leasedAt, now)}`;
    how = `leased to ${copy.agent}${since}, attempt ${b.attempts} of ${b.maxAttempts}`;
  } else if (head.cause === 'retry_backoff') {
    how = `waiting for its attempt ${b.attempts + 1} of ${b.maxAttempts}, due at ${when(b.availableAt, now)}`;
  } else {
    how = head.explanation.replace(/\.$/, '').replace(/^./, (c) => c.toLowerCase());
  }
  return {
    cause: 'waiting_behind',
    explanation: `Behind ${what}, ${how}.`,
    waiting_behind: {
      message_id: blocker.message_id,
      channel_sequence_id: blocker.channel_sequence_id,
      cause: head.cause,
    },
  };
}

/** The cause that does not depend on the lane, or undefined: it is ready to be handed out. */
function ownCause(
  c: CopyView,
  now: number,
): { cause: JourneyCause; explanation: string } | undefined {
  if (c.state === 'acked') {
    const done = c.finishedAt == null ? '' : ` at ${when(c.finishedAt, now)}`;
    return { cause: 'acked', explanation: `${c.agent} acked it${done}.` };
  }
  if (c.state === 'dead_letter') return deadLetter(c, now);
  if (c.paused != null) {
    return {
      cause: 'paused',
      explanation: `Deliveries to ${c.agent} are paused by ${c.paused.by} since ${when(c.paused.since, now)}.`,
    };
  }
  if (c.deliverAt != null && c.deliverAt > now) {
    return { cause: 'scheduled', explanation: `Scheduled for ${when(c.deliverAt, now)}.` };
  }
  if (c.state === 'leased') {
    const end = c.leaseExpiresAt ?? now;
    if (end > now) {
      const since = c.leasedAt == null ? '' : ` since ${when(c.leasedAt, now)}`;
      return {
        cause: 'leased',
        explanation: `Leased to ${c.agent}${since}, attempt ${c.attempts} of ${c.maxAttempts}; the lease ends at ${when(end, now)}.`,
      };
    }
    // the lease has ended and the sweep has not seen it yet: told as what the sweep will make it
    if (c.attempts >= c.maxAttempts) {
      return {
        cause: 'dead_letter',
        explanation: `${c.agent}'s lease on attempt ${c.attempts} of ${c.maxAttempts} ended at ${when(end, now)}: it is dead-lettered at the next sweep.`,
      };
    }
    return {
      cause: 'retry_backoff',
      explanation: `${c.agent}'s lease on attempt ${c.attempts} ended at ${when(end, now)}; attempt ${c.attempts + 1} of ${c.maxAttempts} follows after a backoff.`,
    };
  }
  if (c.availableAt > now) {
    const n = c.attempts;
    const failed =
      c.lastFailure == null
        ? `attempt ${n} failed`
        : c.lastFailure.nacked
          ? `attempt ${n} was nacked by ${c.agent}${c.lastFailure.reason == null ? '' : ` ("${c.lastFailure.reason}")`}`
          : `the lease of attempt ${n} expired`;
    return {
      cause: 'retry_backoff',
      explanation: `${capital(failed)}; attempt ${c.attempts + 1} of ${c.maxAttempts} is due at ${when(c.availableAt, now)}.`,
    };
  }
  return undefined;
}

function waitingForPoll(c: CopyView, now: number): { cause: JourneyCause; explanation: string } {
  const waiting =
    c.waiting === undefined
      ? ''
      : `; ${c.waiting} ${c.waiting === 1 ? 'message waits' : 'messages wait'} for it`;
  const polled =
    c.lastPoll === null
      ? `${c.agent} has never polled`
      : `${c.agent} has not polled since ${when(c.lastPoll, now)}`;
  return { cause: 'waiting_for_poll', explanation: `Ready: ${polled}${waiting}.` };
}

/** What each dead-letter reason of the store means, for a person. */
const DEAD_LETTER_WORDS: Readonly<Record<string, (c: CopyView) => string>> = {
  lease_expired: (c) => `its lease expired on the last of ${c.maxAttempts} attempts`,
  nacked: (c) => `${c.agent} nacked the last of ${c.maxAttempts} attempts`,
  rejected: (c) => `${c.agent} rejected it`,
  evicted: (c) =>
    `${c.agent}'s full queue dropped it (the oldest normal copy of the largest holder) for a newer message`,
  queue_full: (c) => `${c.agent}'s queue was full`,
  integrity: () => 'its stored bytes failed their checksum (corrupt)',
  expired: () => 'its deadline passed before it was acked',
};

function deadLetter(c: CopyView, now: number): { cause: JourneyCause; explanation: string } {
  const words = DEAD_LETTER_WORDS[c.reason ?? '']?.(c) ?? `reason ${c.reason ?? 'unknown'}`;
  const done = c.finishedAt == null ? '' : ` at ${when(c.finishedAt, now)}`;
  const note = c.note == null ? '' : ` ("${c.note}")`;
  return {
    cause: 'dead_letter',
    explanation: `Dead-lettered for ${c.agent}${done}: ${words}${note}.`,
  };
}

/** "12:01:07 (6 min ago)", "12:05:03 (in 3 min)": the time of day (UTC) and how far from now. */
export function when(t: number, now: number): string {
  const clock = new Date(t).toISOString().slice(11, 19);
  const d = Math.round((t - now) / 1000);
  return `${clock} (${d === 0 ? 'now' : d < 0 ? `${span(-d)} ago` : `in ${span(d)}`})`;
}

function span(s: number): string {
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86_400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} d`;
}

function capital(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// ---- from the store's rows to the journey (both engines) ----

/** A recipient's latest copy, as the engines read it. */
export interface JourneyCopyRow {
  readonly id: number;
  readonly recipient: string;
  readonly channel: string;
  readonly state: number;
  readonly attempt: number;
  readonly available_at: number;
  readonly lease_expires_at: number | null;
  readonly reason: string | null;
  readonly note: string | null;
  readonly dead_at: number | null;
  readonly last_poll: number | null;
}

export interface JourneyEventRow {
  readonly recipient: string;
  readonly delivery: number;
  readonly at: number;
  readonly event: DeliveryEvent;
  readonly attempt: number;
  readonly detail: string | null;
}

/** The first open copy of a recipient's lane in a channel. */
export interface LaneHeadRow {
  readonly id: number;
  readonly message: number;
  readonly state: number;
  readonly attempt: number;
  readonly available_at: number;
  readonly lease_expires_at: number | null;
  readonly message_id: string;
  readonly seq: number;
  readonly kind: string;
  readonly sender: string;
}

/** What the assembly asks the engine for, per open copy (sync on SQLite, async on PostgreSQL). */
export interface JourneyLookups {
  head(
    recipient: string,
    channel: string,
  ): LaneHeadRow | undefined | Promise<LaneHeadRow | undefined>;
  lastLeased(message: number, delivery: number): number | null | Promise<number | null>;
  waiting(recipient: string): number | Promise<number>;
}

/** An agent's last poll is written at most this often, ms (docs/design/journey.md, "Last poll"). */
export const POLL_MARK_MS = 1000;

const OPEN = new Set<number>([DeliveryState.pending, DeliveryState.leased]);

/** The store's rows of a message's journey, with each open copy's lane head and queue. */
export async function journeyRows(
  acceptedAt: number,
  copies: readonly JourneyCopyRow[],
  events: readonly JourneyEventRow[],
  lookups: JourneyLookups,
): Promise<JourneyRows> {
  const out: JourneyCopy[] = [];
  for (const c of copies) {
    const open = OPEN.has(c.state);
    const h = open ? await lookups.head(c.recipient, c.channel) : undefined;
    const head =
      h === undefined || h.id === c.id
        ? null
        : {
            messageId: h.message_id,
            seq: h.seq,
            kind: h.kind,
            sender: h.sender,
            delivery: h.id,
            state: STATE_NAME[h.state as DeliveryState],
            attempts: h.attempt,
            availableAt: h.available_at,
            leaseExpiresAt: h.lease_expires_at,
            leasedAt: await lookups.lastLeased(h.message, h.id),
          };
    out.push({
      recipient: c.recipient,
      delivery: c.id,
      state: STATE_NAME[c.state as DeliveryState],
      attempts: c.attempt,
      availableAt: c.available_at,
      leaseExpiresAt: c.lease_expires_at,
      reason: c.reason,
      note: c.note,
      deadAt: c.dead_at,
      lastPoll: c.last_poll,
      waiting: open ? await lookups.waiting(c.recipient) : 0,
      head,
    });
  }
  return { acceptedAt, copies: out, events };
}

/** One recipient's part of GET /v1/messages/{message_id}/journey (docs/reference/adapter-api.md). */
export interface RecipientJourney {
  readonly agent: string;
  readonly state: string;
  readonly attempts: number;
  readonly reason: string | null;
  readonly note: string | null;
  readonly cause: JourneyCause;
  readonly explanation: string;
  readonly last_poll: string | null;
  readonly waiting_behind: CopyCause['waiting_behind'];
  readonly events: readonly {
    readonly at: string;
    readonly event: DeliveryEvent | 'queued';
    readonly attempt: number;
    readonly detail: Record<string, unknown> | null;
  }[];
}

/** Each recipient's journey (`only`: that recipient's alone), its cause worked out at `now`. */
export function recipientJourneys(
  rows: JourneyRows,
  opts: { readonly maxAttempts: number; readonly now: number; readonly only?: string },
): RecipientJourney[] {
  const { maxAttempts, now } = opts;
  const iso = (t: number) => new Date(t).toISOString();
  return rows.copies
    .filter((c) => opts.only === undefined || c.recipient === opts.only)
    .map((c) => {
      const mine = rows.events.filter((e) => e.recipient === c.recipient);
      const ofCopy = mine.filter((e) => e.delivery === c.delivery);
      const last = (names: readonly string[]) => ofCopy.findLast((e) => names.includes(e.event));
      const failed = last(['nacked', 'lease_expired']);
      const view: CopyView = {
        agent: c.recipient,
        state: c.state,
        attempts: c.attempts,
        maxAttempts,
        availableAt: c.availableAt,
        leaseExpiresAt: c.leaseExpiresAt,
        leasedAt: last(['leased'])?.at ?? null,
        finishedAt: c.state === 'acked' ? (last(['acked'])?.at ?? null) : c.deadAt,
        reason: c.reason,
        note: c.note,
        lastFailure:
          failed === undefined
            ? null
            : {
                nacked: failed.event === 'nacked',
                reason: (parse(failed.detail)?.reason as string | null | undefined) ?? null,
              },
        lastPoll: c.lastPoll,
        waiting: c.waiting,
        // a lease already handed out runs its course: only a waiting copy is held by a pause
        paused: c.state === 'pending' ? (rows.pausedNow?.[c.recipient] ?? null) : null,
      };
      const h = c.head;
      const blocker =
        h === null
          ? null
          : {
              message_id: h.messageId,
              channel_sequence_id: h.seq,
              kind: h.kind,
              sender: h.sender,
              copy: {
                agent: c.recipient,
                state: h.state,
                attempts: h.attempts,
                maxAttempts,
                availableAt: h.availableAt,
                leaseExpiresAt: h.leaseExpiresAt,
                leasedAt: h.leasedAt,
                lastPoll: c.lastPoll,
              },
            };
      const cause = causeOf(view, blocker, now);
      return {
        agent: c.recipient,
        state: c.state,
        attempts: c.attempts,
        reason: c.reason,
        note: c.note,
        cause: cause.cause,
        explanation: cause.explanation,
        last_poll: c.lastPoll === null ? null : iso(c.lastPoll),
        waiting_behind: cause.waiting_behind,
        events: [
          { at: iso(rows.acceptedAt), event: 'queued' as const, attempt: 0, detail: null },
          ...withPauses(
            mine.map((e) => ({
              at: e.at,
              event: e.event,
              attempt: e.attempt,
              detail: parse(e.detail),
            })),
            (rows.pauses ?? []).filter(
              (p) =>
                p.agent === c.recipient && (view.finishedAt == null || p.at <= view.finishedAt),
            ),
          ).map((e) => ({ ...e, at: iso(e.at) })),
        ],
      };
    });
}

type TimedEvent = {
  at: number;
  event: DeliveryEvent;
  attempt: number;
  detail: Record<string, unknown> | null;
};

/** The copy's events with the recipient's pauses and resumes among them, by time (stable). */
function withPauses(events: TimedEvent[], pauses: readonly PauseEvent[]): TimedEvent[] {
  if (pauses.length === 0) return events;
  const out = [...events];
  for (const p of pauses) {
    // in the same millisecond a resume came first (nothing is leased while paused), a pause last
    const at = out.findIndex((e) => e.at > p.at || (e.at === p.at && p.event === 'resumed'));
    const e = { at: p.at, event: p.event, attempt: 0, detail: { by: p.by } };
    if (at < 0) out.push(e);
    else out.splice(at, 0, e);
  }
  return out;
}

function parse(detail: string | null): Record<string, unknown> | null {
  return detail === null ? null : (JSON.parse(detail) as Record<string, unknown>);
}
