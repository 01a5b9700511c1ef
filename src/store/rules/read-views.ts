/**
 * What readers are served, from the rows either engine reads (docs/design/architecture.md, the
 * Store): a message's status with each recipient's latest delivery, a dead letter's JSON, an
 * agent's state, a thread's page. Pure: a row that fails its checksum is left to the caller's
 * `intact` (corrupt-rows.ts) and shown as "null", never its bytes.
 */
import { deadLetterJson } from '../../protocol/wire.js';
import type {
  AgentState,
  DeliveryState,
  DeliveryStateName,
  MessageStatus,
  ThreadPage,
} from '../store.js';
import { type BodyRow, type DeadRow, type RecipientRow, STATE_NAME } from './stored-message.js';
import { withThreadFields } from './thread-rows.js';

/** A stored row as readers see it: its JSON with thread fields, or "null" when it is corrupt. */
export function servedBody(r: BodyRow, intact: (r: BodyRow) => boolean): string {
  return intact(r) ? withThreadFields(r.body) : 'null';
}

/**
 * A message's status: its JSON (served or "null") and each recipient's latest delivery (a
 * replayed dead letter has a newer one: rows come in id order, the last of each recipient tells).
 */
export function messageStatusOf(
  m: BodyRow & { sender: string },
  rows: Iterable<RecipientRow>,
  intact: (r: BodyRow) => boolean,
): MessageStatus {
  const latest = new Map<string, RecipientRow>();
  for (const r of rows) latest.set(r.recipient, r);
  const recipients = [...latest.values()].map((r) => ({
    agent: r.recipient,
    state: STATE_NAME[r.state as DeliveryState],
    attempts: r.attempt,
    reason: r.reason,
    ...(r.note === null ? {} : { note: r.note }),
  }));
  return { message: servedBody(m, intact), sender: m.sender, recipients };
}

/** A dead letter's JSON; an integrity dead letter's message is the corrupt row: "null". */
export function deadLetterView(r: DeadRow, intact: (r: BodyRow) => boolean): string {
  return deadLetterJson(
    {
      id: r.id,
      reason: r.reason,
      attempts: r.attempts,
      recipient: r.recipient,
      deadLetteredAt: r.created_at,
      replayDeliveryId: r.replay_delivery,
      note: r.note,
    },
    servedBody({ id: r.message, body: r.body, checksum: r.checksum }, intact),
  );
}

/** What an operator sees of an agent beside its heartbeat and depths (GET /v1/agents). */
export interface AgentCounts {
  readonly lastPoll: number | null;
  readonly pending: number;
  readonly critical_pending: number;
  readonly leased: number;
  readonly dead_letters: number;
  readonly paused: { readonly since: number; readonly by: string } | null;
}

/** An agent's state: its last heartbeat (ms, null: never), its queue's depths and counts. */
export function agentState(
  id: string,
  lastSeen: number | null | undefined,
  depth: { all: number; critical: number },
  c: AgentCounts,
): AgentState {
  const iso = (t: number | null | undefined) =>
    t === undefined || t === null ? null : new Date(Number(t)).toISOString();
  return {
    id,
    last_seen: iso(lastSeen),
    last_poll: iso(c.lastPoll),
    queue_depth: depth.all,
    critical_depth: depth.critical,
    pending: Number(c.pending),
    critical_pending: Number(c.critical_pending),
    leased: Number(c.leased),
    dead_letters: Number(c.dead_letters),
    paused: c.paused !== null,
    paused_since: iso(c.paused?.since),
    paused_by: c.paused?.by ?? null,
  };
}

/** A thread page: its messages, and the cursor after the last (the row id of `ids`' last served). */
export function threadPage(messages: string[], ids: readonly number[]): ThreadPage {
  return { messages, nextAfter: messages.length === 0 ? null : ids[messages.length - 1]! };
}

/** A replay page's delivery states for its reader, by message_id. */
export function deliveryStates(
  rows: Iterable<{ message_id: string; state: DeliveryState }>,
): Record<string, DeliveryStateName> {
  const out: Record<string, DeliveryStateName> = {};
  for (const r of rows) out[r.message_id] = STATE_NAME[r.state];
  return out;
}
