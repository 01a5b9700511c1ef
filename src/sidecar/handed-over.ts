/**
 * What the sidecar handed its agent, by delivery id, while tracing is on: the contexts its
 * `settle` spans link to when the agent acks or nacks (the adapter's answer to an ack names no
 * message). Bounded: the oldest entries go first; an ack of a forgotten one is still recorded,
 * without its link.
 */
import type { HandedOver } from '../telemetry/messaging.js';

/** Deliveries remembered at most: a few minutes of a busy agent's hand-overs. */
export const HANDED_OVER_MAX = 10_000;

export class HandedOverMemory {
  readonly #byId = new Map<number, HandedOver>();
  readonly #max: number;

  constructor(max = HANDED_OVER_MAX) {
    this.#max = max;
  }

  get size(): number {
    return this.#byId.size;
  }

  remember(items: readonly HandedOver[]): void {
    for (const item of items) {
      this.#byId.delete(item.deliveryId); // a copy handed over again goes to the back
      this.#byId.set(item.deliveryId, item);
    }
    for (const id of this.#byId.keys()) {
      if (this.#byId.size <= this.#max) break;
      this.#byId.delete(id);
    }
  }

  /** The remembered ones among `ids`, forgotten now (a settled delivery is not handed again). */
  take(ids: readonly number[]): HandedOver[] {
    const out: HandedOver[] = [];
    for (const id of ids) {
      const item = this.#byId.get(id);
      if (item === undefined) continue;
      out.push(item);
      this.#byId.delete(id);
    }
    return out;
  }
}
