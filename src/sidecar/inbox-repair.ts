/**
 * Inbox repair: the sidecar hands each channel's messages to the agent in sequence order with
 * no gap, and does not hand over again a message the agent has already acked through it.
 *
 * - It remembers, on disk, the last channel_sequence_id it handed over per channel. A delivery
 *   past the next number means a gap (a delivery the sidecar never saw: taken with the agent's
 *   token elsewhere, or dead-lettered): the missing range is fetched from
 *   /v1/channels/{name}/messages and handed over first, in order, with delivery ids of the
 *   sidecar's own (negative), which the agent acks like any other.
 * - A redelivery of a message the agent acked through the sidecar is acked upstream for it and
 *   not handed over. One handed over but not acked may come again: the agent may have crashed
 *   before finishing it (at-least-once).
 * - The agent's own broadcasts: the adapter does not deliver them to their sender, so they are
 *   holes in the agent's view of the channel. They count as handed over: when the sidecar sends
 *   one and gets its sequence number back, it advances its mark past it if it is next, and it
 *   skips the agent's own messages in a replay.
 * - A channel the sidecar has no memory of starts at the first message it sees: a sidecar whose
 *   file was lost does not replay a channel's whole history to its agent.
 */
import type { Delivery, Message } from '../protocol/wire.js';
import type { SidecarFile } from '../store/sidecar-file.js';
import type { AdapterClient } from './adapter-client.js';

/** How long the sidecar remembers an ack: far past any lease and retry backoff. */
const ACKED_MEMORY_MS = 7 * 24 * 3600 * 1000;
/** Deliveries handed over whose ack the sidecar will match to a message. */
const HANDED_MAP_MAX = 100_000;

export class InboxRepair {
  readonly #agent: string;
  readonly #client: AdapterClient;
  readonly #file: SidecarFile;
  /** Upstream delivery id → message id, for the deliveries handed over since start. */
  readonly #handedIds = new Map<number, string>();
  #acks = 0;

  constructor(file: SidecarFile, agent: string, client: AdapterClient) {
    this.#file = file;
    this.#agent = agent;
    this.#client = client;
  }

  /**
   * Turns the adapter's inbox answer into what the agent gets: acked redeliveries acked
   * upstream and left out, gaps filled from replay, in order.
   */
  async repair(answerBody: string): Promise<string> {
    const { deliveries } = JSON.parse(answerBody) as { deliveries: Delivery[] };
    const out: Delivery[] = [];
    const ackUpstream: number[] = [];
    const marks = new Map<string, number>();
    const mark = (channel: string): number | undefined =>
      marks.get(channel) ?? this.#file.handed(channel);
    for (const d of deliveries) {
      const m = d.message;
      if (this.#file.isAcked(m.message_id)) {
        ackUpstream.push(d.delivery_id);
        continue;
      }
      const last = mark(m.channel);
      if (last !== undefined && m.channel_sequence_id > last + 1) {
        for (const missing of await this.#replay(
          m.channel,
          last,
          m.channel_sequence_id - last - 1,
        )) {
          if (missing.sender === this.#agent || this.#file.isAcked(missing.message_id)) continue;
          const id = this.#file.localDelivery(missing.message_id);
          out.push({
            delivery_id: -id,
            attempt: 1,
            lease_expires_at: d.lease_expires_at,
            message: missing,
          });
        }
      }
      marks.set(m.channel, Math.max(last ?? 0, m.channel_sequence_id));
      this.#handedIds.set(d.delivery_id, m.message_id);
      out.push(d);
    }
    this.#file.setHanded(marks);
    if (this.#handedIds.size > HANDED_MAP_MAX) {
      for (const k of [...this.#handedIds.keys()].slice(0, this.#handedIds.size - HANDED_MAP_MAX))
        this.#handedIds.delete(k);
    }
    if (ackUpstream.length > 0) {
      await this.#client
        .request('POST', '/v1/acks', JSON.stringify({ delivery_ids: ackUpstream }))
        .catch(() => {}); // not acked now: it comes again, and is acked then
    }
    return JSON.stringify({ deliveries: out });
  }

  /**
   * The agent's acks: its own ids go to the adapter, the sidecar's (negative) stay here; every
   * message acked is remembered. Returns the ids for the adapter.
   */
  acked(ids: readonly number[]): { upstream: number[]; local: number[] } {
    const messages: string[] = [];
    for (const id of ids) {
      const message = id < 0 ? this.#file.localDeliveryMessage(-id) : this.#handedIds.get(id);
      if (message !== undefined) messages.push(message);
    }
    const now = Date.now();
    const forget = ++this.#acks % 1000 === 0 ? now - ACKED_MEMORY_MS : undefined;
    this.#file.markAcked(messages, now, forget);
    return splitLocal(ids);
  }

  /** A send of the agent's own came back with its number: it counts as handed over. */
  sent(channel: string, seq: number): void {
    const last = this.#file.handed(channel);
    if (last !== undefined && seq === last + 1) this.#file.setHanded(new Map([[channel, seq]]));
  }

  async #replay(channel: string, after: number, count: number): Promise<Message[]> {
    const out: Message[] = [];
    let from = after;
    while (out.length < count) {
      const limit = Math.min(1000, count - out.length);
      const res = await this.#client.request(
        'GET',
        `/v1/channels/${encodeURIComponent(channel)}/messages?after=${from}&limit=${limit}`,
      );
      if (res.status !== 200) break; // not ours to read, or pruned: hand over what we have
      const { messages } = JSON.parse(res.body) as { messages: Message[] };
      if (messages.length === 0) break;
      out.push(...messages);
      from = messages.at(-1)!.channel_sequence_id;
    }
    return out;
  }
}

/** The agent's delivery ids: the adapter's (positive) and the sidecar's own (negative). */
export function splitLocal(ids: readonly number[]): { upstream: number[]; local: number[] } {
  return { upstream: ids.filter((id) => id > 0), local: ids.filter((id) => id < 0) };
}
