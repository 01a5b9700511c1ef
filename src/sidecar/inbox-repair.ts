/**
 * Inbox repair: the sidecar hands each channel's messages to the agent in sequence order with
 * no gap, never hands over again a message the agent acked through it, and keeps to the agent's
 * `max`. Everything it has not handed over yet lives on disk, so a SIGKILL loses no place. The
 * marks of what it handed over and of what the agent acked reach the disk in one commit before
 * the answer that depends on them (persist(): before a poll's answer, before an ack's 2xx), so
 * after a SIGKILL an acked message is never handed over again (sidecar-file.ts).
 *
 * - It remembers the last channel_sequence_id handed over per channel. A delivery past the next
 *   number opens a gap: the delivery is held back (table `held`) and the gap is scanned by
 *   replay, one page at a time, its progress saved with each page (table `gaps`). The adapter
 *   marks each replayed message with the state of the agent's own delivery of it
 *   (`delivery_states`): a message acked elsewhere (taken with the agent's token behind the
 *   sidecar's back) becomes a copy with a delivery id of the sidecar's own (negative); a message
 *   evicted or dead-lettered for the agent, one it sent itself, or one it never had is skipped,
 *   so repair never undoes the adapter's bound.
 * - A copy has a lease of its own (as long as the adapter's, as last seen): one the agent does
 *   not ack comes again, a nack makes it due at once, a nack with retry false drops it. While a
 *   copy is leased, later deliveries of its channel are held back, as the adapter does.
 * - A redelivery of a message the agent acked through the sidecar is acked upstream for it and
 *   not handed over.
 * - The agent's own broadcasts count as handed over (sent()): the adapter does not deliver them
 *   to their sender, so they are not gaps.
 * - A channel the sidecar has no memory of starts at the first message it sees: a sidecar whose
 *   file was lost does not replay a channel's whole history to its agent.
 * - A reply handed to an ask (docs/design/time.md, "Asking") counts as handed over although it
 *   came out of its channel's order (table `taken`): a gap scan past it skips it, a mark reaches
 *   past it, and an ack of its delivery id is matched to it, also after a restart. One a poll
 *   brings while an ask waits for it goes to the ask (claim), not into the poll's answer.
 */

import { pathSegment } from '../protocol/agent-api.js';
import { GatewayError } from '../protocol/errors.js';
import type { Answer } from '../protocol/router.js';
import type { Delivery, Message } from '../protocol/wire.js';
import type { Copy, Held, NewCopy, SidecarFile } from '../store/sidecar/sidecar-file.js';
import type { AdapterResponse } from './adapter-client.js';
import type { Upstream } from './circuit-breaker.js';
import type { SidecarEventMap } from './events.js';

/** How long the sidecar remembers an ack: far past any lease and retry backoff. */
const ACKED_MEMORY_MS = 7 * 24 * 3600 * 1000;
/** Deliveries handed over whose ack the sidecar will match to a message. */
const HANDED_MAP_MAX = 100_000;
/** Messages per replay page: at 256 KiB each at worst, 25 MiB held at once. */
const PAGE = 100;

/** A replay page, with the state of the agent's own delivery of each message. */
interface Page {
  readonly messages: Message[];
  readonly delivery_states?: Record<string, string>;
}

type Poll = (waitS: number, max: number) => Promise<Answer>;

/** One thing the agent may be handed next in a channel, in sequence order. */
type Item = { seq: number; copy: Copy } | { seq: number; held: Held };

export class InboxRepair {
  readonly #agent: string;
  readonly #client: Upstream;
  readonly #events: SidecarEventMap | undefined;
  readonly #file: SidecarFile;
  /** Upstream delivery id → message id, for the deliveries handed over since start. */
  readonly #handedIds = new Map<number, string>();
  /** The adapter's lease as last seen: the length of a copy's lease. */
  #leaseMs = 30_000;
  #acks = 0;
  /**
   * True when the file is known to hold no gap, no held delivery and no open copy: the state
   * of nearly every poll, which then needs none of the nine reads of them a poll made
   * (docs/design/durability.md). Set only after reading all three empty; whatever adds one of them (gapPage,
   * hold) sets it false first, so it is never true wrongly; false is read again at the next
   * poll, since acks, hand-overs and scans take them away.
   */
  #calm = false;

  /**
   * Asked of each reply (a delivery whose message has `reply_to`) a poll brings from the
   * adapter: true when an ask waits for it and has been given it (ask.ts). Such a reply is left
   * out of the poll's answer and counts as handed over.
   */
  claim: ((d: Delivery) => boolean) | undefined;

  /** `events` hears 'inbox:gap' when a delivery's number opens a gap. */
  constructor(file: SidecarFile, agent: string, client: Upstream, events?: SidecarEventMap) {
    this.#file = file;
    this.#agent = agent;
    this.#client = client;
    this.#events = events;
  }

  /**
   * The agent's poll: what the sidecar already holds first (copies due, held deliveries), then
   * the adapter's inbox for the rest of `max`, gaps scanned and filled in order.
   */
  async inbox(waitS: number, max: number, upstream: Poll): Promise<Answer> {
    const answer = await this.#inbox(waitS, max, upstream);
    this.persist(); // what the answer hands over, and the acks taken before it, on disk first
    return answer;
  }

  /**
   * Commits the marks of what was handed over and acked so far (one NORMAL commit, enough for a
   * process crash), to call before an answer that depends on them. A file that cannot be
   * written is a retryable 503: the deliveries come again after their leases, an ack is taken
   * again (acking twice is harmless).
   */
  persist(): void {
    try {
      this.#file.commitBehind();
    } catch (err) {
      throw new GatewayError(
        'storage_error',
        "the sidecar's file cannot be written; retry after the Retry-After",
        { retryAfterS: 1, cause: err },
      );
    }
  }

  async #inbox(waitS: number, max: number, upstream: Poll): Promise<Answer> {
    const calm = this.#isCalm();
    if (!calm) await this.#scan(max);
    const out = calm ? [] : this.#takeReady(max);
    if (out.length < max) {
      const answer = await upstream(out.length > 0 ? 0 : waitS, max - out.length);
      if (answer.status !== 200) return out.length > 0 ? render(out) : answer;
      const polled = JSON.parse(answer.body as string) as Polled;
      const { deliveries } = polled;
      const gapsBefore = this.#gapCount();
      const first = out.length;
      await this.#take(deliveries, out);
      if (this.#gapCount() > gapsBefore) {
        await this.#scan(max - out.length);
        out.push(...this.#takeReady(max - out.length));
      } else if (first === 0 && out.length === deliveries.length) {
        return answer; // every delivery handed over as the adapter wrote it: its bytes will do
      }
      return render(out, polled);
    }
    return render(out);
  }

  /**
   * The agent's acks: its own ids go to the adapter, the sidecar's (negative) are settled here;
   * every message acked is remembered (in memory at once; on disk with persist(), which the
   * caller makes before it answers). A negative id the sidecar never made is `unknown`.
   */
  acked(ids: readonly number[]): Settled {
    const messages: string[] = [];
    const out: Settled = { upstream: [], local: [], unknown: [] };
    for (const id of ids) {
      if (id > 0) {
        const message = this.#handedIds.get(id) ?? this.#file.takenDelivery(id);
        if (message !== undefined) messages.push(message);
        out.upstream.push(id);
        continue;
      }
      const copy = this.#file.localDelivery(-id);
      if (copy === undefined) {
        out.unknown.push(id);
        continue;
      }
      messages.push(copy.message_id);
      this.#file.copyDone(-id);
      out.local.push(id);
    }
    const now = Date.now();
    const forget = ++this.#acks % 1000 === 0 ? now - ACKED_MEMORY_MS : undefined;
    if (messages.length > 0 || forget !== undefined) this.#file.markAcked(messages, now, forget);
    return out;
  }

  /**
   * The agent's nacks of copies: one leased to it is due again at once, or, with retry false,
   * dropped; one not leased (acked, due again already) is ignored, and one the sidecar never
   * made is `unknown`, as the adapter answers for its own deliveries.
   */
  nacked(ids: readonly number[], retry: boolean): Settled & { ignored: number[] } {
    const out = {
      upstream: [] as number[],
      local: [] as number[],
      unknown: [] as number[],
      ignored: [] as number[],
    };
    for (const id of ids) {
      if (id > 0) out.upstream.push(id);
      else if (this.#file.localDelivery(-id) === undefined) out.unknown.push(id);
      else if (!this.isLeasedCopy(id)) out.ignored.push(id);
      else {
        if (retry) this.#file.copyDue(-id);
        else this.#file.copyDone(-id);
        out.local.push(id);
      }
    }
    return out;
  }

  /**
   * Extends the leases of these copies (negative ids) by `extendMs` from now; undefined, and
   * nothing changed, if one of them is not leased to the agent (acked, dropped, or due again).
   */
  extended(
    ids: readonly number[],
    extendMs: number,
  ): { delivery_id: number; lease_expires_at: string }[] | undefined {
    if (!ids.every((id) => this.isLeasedCopy(id))) return undefined;
    const expires = Date.now() + extendMs;
    this.#file.extendCopies(
      ids.map((id) => -id),
      expires,
    );
    const at = new Date(expires).toISOString();
    return ids.map((id) => ({ delivery_id: id, lease_expires_at: at }));
  }

  /** Whether this (negative) id is a copy handed to the agent and not yet acked or due again. */
  isLeasedCopy(id: number): boolean {
    return this.#file.copyLeased(-id, Date.now());
  }

  /**
   * A reply handed to an ask, leased to the agent or settled before: handed over, out of its
   * channel's order. Committed before the ask's answer (the file's `taken`; the mark with the
   * next persist()): a later gap scan does not hand it again, and the agent's ack of it is
   * remembered as any ack through the sidecar.
   */
  taken(d: { readonly delivery_id: number; readonly message: Message }): void {
    const m = d.message;
    const t = {
      message_id: m.message_id,
      channel: m.channel,
      seq: m.channel_sequence_id,
      delivery: d.delivery_id,
    };
    this.#file.markTaken(t, Date.now());
    this.#handed(d as Delivery);
    // held back behind a gap or a copy, or copied from a replay (acked elsewhere), before the
    // ask took it: the ask has it now. (A redelivery after this is handed over again, as any:
    // the ask that took it may have died, or the agent never acked it.)
    this.#file.handOver([], [m.message_id]);
    if (!this.#calm) {
      for (const c of this.#file.openCopies())
        if (c.message_id === m.message_id) this.#file.copyDone(c.id);
    }
    const last = this.#file.handed(m.channel);
    if (last === undefined) this.#file.setHanded(new Map([[m.channel, t.seq]]));
    else if (t.seq === last + 1)
      this.#file.setHanded(new Map([[m.channel, this.#last(m.channel) ?? t.seq]]));
  }

  /**
   * The last number of `channel` handed over: its mark (this answer's `marks`, else the file's),
   * and past it the replies asks took right after it, which need no scan.
   */
  #last(channel: string, marks?: ReadonlyMap<string, number>): number | undefined {
    let last = marks?.get(channel) ?? this.#file.handed(channel);
    if (last === undefined) return undefined;
    while (this.#file.takenAt(channel, last + 1)) last++;
    return last;
  }

  /** A send of the agent's own came back with its number: it counts as handed over. */
  sent(channel: string, seq: number): void {
    const last = this.#file.handed(channel);
    if (last !== undefined && seq === last + 1) this.#file.setHanded(new Map([[channel, seq]]));
  }

  /** Sorts the adapter's deliveries: acked before (ack upstream), held back, or handed over. */
  async #take(deliveries: readonly Delivery[], out: Delivery[]): Promise<void> {
    const ackUpstream: number[] = [];
    const busy = this.#calm ? new Set<string>() : this.#busyChannels();
    const marks = new Map<string, number>();
    const now = Date.now();
    for (const d of deliveries) {
      const m = d.message;
      const lease = Date.parse(d.lease_expires_at) - now;
      if (lease > 0) this.#leaseMs = lease;
      const last = this.#last(m.channel, marks);
      // Only a message handed over before can have been acked through the sidecar, and every
      // hand-over moves its channel's mark to at least its number, in memory at once and on disk
      // before the answer that hands it over (persist()), so before any ack of it. So a delivery
      // past the mark, nearly every delivery, needs no look in the ack memory; but for a reply
      // an ask took out of order, which is in memory too.
      const before =
        (last !== undefined && m.channel_sequence_id <= last) || this.#file.isTaken(m.message_id);
      if (before && this.#file.isAcked(m.message_id)) {
        ackUpstream.push(d.delivery_id);
        continue;
      }
      if (m.reply_to !== undefined && this.claim?.(d) === true) {
        this.taken(d);
        continue;
      }
      if (!busy.has(m.channel) && last !== undefined && m.channel_sequence_id > last + 1) {
        this.#calm = false;
        this.#file.gapPage(m.channel, [], last, m.channel_sequence_id);
        busy.add(m.channel);
        this.#events?.emit('inbox:gap', {
          channel: m.channel,
          after: last,
          until: m.channel_sequence_id,
        });
      }
      if (busy.has(m.channel)) {
        this.#calm = false;
        this.#file.hold(heldOf(d));
        continue;
      }
      marks.set(m.channel, Math.max(last ?? 0, m.channel_sequence_id));
      this.#handed(d);
      out.push(d);
    }
    for (const [channel, seq] of marks) marks.set(channel, this.#last(channel, marks) ?? seq);
    this.#file.setHanded(marks);
    if (ackUpstream.length > 0) await this.#ackUpstream(ackUpstream);
  }

  /** Acks, for the agent, redeliveries of messages it acked through the sidecar. */
  async #ackUpstream(ids: number[]): Promise<void> {
    await this.#client.request('POST', '/v1/acks', JSON.stringify({ delivery_ids: ids })).then(
      () => {},
      () => {}, // not acked now: it comes again, and is acked then
    );
  }

  /**
   * Scans the open gaps, a page at a time, each page's copies and progress saved together;
   * stops early once `enough` copies wait (the agent cannot take more now). A gap the adapter
   * will not replay (pruned, not readable) closes: what it had is handed over.
   */
  async #scan(enough: number): Promise<void> {
    for (const gap of this.#file.gaps()) {
      let after: number | undefined = gap.after;
      while (after !== undefined && this.#file.openCopies().length < enough) {
        const left = gap.until - after - 1;
        if (left <= 0) {
          this.#file.gapPage(gap.channel, [], undefined, gap.until);
          break;
        }
        const path: string = `/v1/channels/${pathSegment(gap.channel)}/messages?after=${after}&limit=${Math.min(PAGE, left)}`;
        const res: AdapterResponse | undefined = await this.#client
          .request('GET', path)
          .catch(() => undefined);
        if (res === undefined || res.retryable) return; // the adapter is away: go on next poll
        const page: Page = res.status === 200 ? (JSON.parse(res.body) as Page) : { messages: [] };
        const copies: NewCopy[] = [];
        for (const m of page.messages) {
          if (m.channel_sequence_id >= gap.until) break;
          const mine = page.delivery_states?.[m.message_id];
          if (
            m.sender === this.#agent ||
            mine !== 'acked' ||
            this.#file.isAcked(m.message_id) ||
            this.#file.isTaken(m.message_id)
          )
            continue;
          copies.push({
            messageId: m.message_id,
            seq: m.channel_sequence_id,
            body: JSON.stringify(m),
            leaseMs: this.#leaseMs,
          });
        }
        const last: number | undefined = page.messages.at(-1)?.channel_sequence_id;
        after = last === undefined || last >= gap.until - 1 ? undefined : last;
        if (copies.length > 0 || after !== undefined) this.#calm = false;
        this.#file.gapPage(gap.channel, copies, after, gap.until);
      }
    }
  }

  /**
   * Up to `max` of what the sidecar holds, channel by channel in sequence order: copies due and
   * held deliveries, each channel up to a copy still leased to the agent or a gap still open.
   */
  #takeReady(max: number): Delivery[] {
    if (max <= 0) return [];
    const ackUpstream: number[] = [];
    const now = Date.now();
    const open = new Set(this.#file.gaps().map((g) => g.channel));
    const lanes = new Map<string, Item[]>();
    const lane = (channel: string) => {
      const items = lanes.get(channel) ?? [];
      lanes.set(channel, items);
      return items;
    };
    for (const copy of this.#file.openCopies()) lane(copy.channel).push({ seq: copy.seq, copy });
    for (const held of this.#file.heldAll()) lane(held.channel).push({ seq: held.seq, held });
    const out: Delivery[] = [];
    const leased: { id: number; leaseExpiresAt: number }[] = [];
    const unheld: string[] = [];
    const marks = new Map<string, number>();
    for (const [channel, items] of lanes) {
      items.sort((a, b) => a.seq - b.seq);
      for (const item of items) {
        if (out.length >= max) break;
        if ('copy' in item) {
          const c = item.copy;
          if (c.lease_expires_at > now) break; // handed, not acked yet: the channel waits
          const expires = now + c.lease_ms;
          leased.push({ id: c.id, leaseExpiresAt: expires });
          out.push({
            delivery_id: -c.id,
            attempt: c.attempt + 1,
            lease_expires_at: new Date(expires).toISOString(),
            message: JSON.parse(c.body) as Message,
          });
        } else {
          if (open.has(channel)) break; // the gap before it is still being scanned
          const d = JSON.parse(item.held.delivery) as Delivery;
          unheld.push(item.held.message_id);
          if (this.#file.isAcked(item.held.message_id)) {
            // a redelivery held back while the agent still had the message, acked since
            ackUpstream.push(d.delivery_id);
            continue;
          }
          this.#handed(d);
          out.push(d);
        }
        marks.set(channel, Math.max(marks.get(channel) ?? 0, item.seq));
      }
    }
    this.#file.handOver(leased, unheld);
    for (const [channel, seq] of marks) marks.set(channel, this.#last(channel, marks) ?? seq);
    this.#file.setHanded(marks);
    if (ackUpstream.length > 0) void this.#ackUpstream(ackUpstream);
    return out;
  }

  /** Whether the file holds no gap, held delivery or open copy (read again unless known). */
  #isCalm(): boolean {
    if (!this.#calm) {
      this.#calm =
        this.#file.gaps().length === 0 &&
        this.#file.heldAll().length === 0 &&
        this.#file.openCopies().length === 0;
    }
    return this.#calm;
  }

  #gapCount(): number {
    return this.#calm ? 0 : this.#file.gaps().length;
  }

  /** Channels where an adapter delivery must wait: a gap, a held delivery or a copy in them. */
  #busyChannels(): Set<string> {
    return new Set([
      ...this.#file.gaps().map((g) => g.channel),
      ...this.#file.heldAll().map((h) => h.channel),
      ...this.#file.openCopies().map((c) => c.channel),
    ]);
  }

  #handed(d: Delivery): void {
    this.#handedIds.set(d.delivery_id, d.message.message_id);
    if (this.#handedIds.size > HANDED_MAP_MAX) {
      const oldest = this.#handedIds.keys().next().value;
      if (oldest !== undefined) this.#handedIds.delete(oldest);
    }
  }
}

function heldOf(d: Delivery): Held {
  return {
    message_id: d.message.message_id,
    channel: d.message.channel,
    seq: d.message.channel_sequence_id,
    delivery: JSON.stringify(d),
  };
}

/** An adapter's inbox answer: a POST /v1/inbox's also has its acks' fields. */
interface Polled {
  readonly deliveries: Delivery[];
  readonly acked?: number[];
  readonly dead_lettered?: number[];
  readonly unknown?: number[];
}

/** The deliveries handed over, after the acks' fields of the adapter's answer if it had them. */
function render(out: readonly Delivery[], polled?: Polled): Answer {
  const acks =
    polled?.acked === undefined
      ? {}
      : { acked: polled.acked, dead_lettered: polled.dead_lettered, unknown: polled.unknown };
  return { status: 200, body: JSON.stringify({ ...acks, deliveries: out }) };
}

/** An ack's or nack's ids: the adapter's, the sidecar's own settled here, and unknown ones. */
export interface Settled {
  readonly upstream: number[];
  readonly local: number[];
  readonly unknown: number[];
}

/** The agent's delivery ids: the adapter's (positive) and the sidecar's own (negative). */
export function splitLocal(ids: readonly number[]): { upstream: number[]; local: number[] } {
  return { upstream: ids.filter((id) => id > 0), local: ids.filter((id) => id < 0) };
}
