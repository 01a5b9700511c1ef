/**
 * The typed client agent runtimes import (`agent-gateway/client`). It speaks to the agent's
 * sidecar on localhost (no token: the pod is the trust boundary), or to the adapter directly
 * with a token. No dependencies beyond Node's fetch.
 *
 * ```ts
 * import { GatewayClient } from 'agent-gateway/client';
 * const gw = new GatewayClient(); // http://127.0.0.1:7070
 * await gw.send({ to: 'product', kind: 'task/request', payload: { task_id: 'T-1', description: '...' } });
 * await gw.receive(async (m) => { ... }, { signal }); // acks after the handler, nacks if it throws
 * ```
 */

import { uuidv7 } from '../protocol/ids.js';
import type { Delivery, Message } from '../protocol/wire.js';

export interface OutgoingMessage {
  readonly to: string;
  readonly kind: string;
  readonly payload?: Record<string, unknown>;
  readonly priority?: 'normal' | 'critical';
  readonly reply_to_sequence_id?: number;
  /** Made for you (a UUIDv7) when absent; set your own to make your retries of a send safe. */
  readonly idempotency_key?: string;
}

export type { Delivery, Message } from '../protocol/wire.js';

/** delivered (201/200: stored by the adapter) or queued (202: in the sidecar's outbox). */
export type SendResult =
  | {
      status: 'delivered';
      message_id: string;
      channel: string;
      channel_sequence_id: number;
      duplicate: boolean;
    }
  | { status: 'queued'; idempotency_key: string; outbox_depth: number };

/** An answer that is not a success, with the error catalogue's code. */
export class GatewayClientError extends Error {
  override name = 'GatewayClientError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryAfterS?: number,
  ) {
    super(message);
  }
}

export interface GatewayClientOptions {
  /** The sidecar (default http://127.0.0.1:7070) or the adapter. */
  readonly url?: string;
  /** The agent's token: only when talking to the adapter directly. */
  readonly token?: string;
}

export interface ReceiveOptions {
  /** Seconds each long poll may wait. Default 30. */
  readonly waitS?: number;
  /** Deliveries per poll. Default 10. */
  readonly max?: number;
  /** Stops the loop (it returns after the poll in progress). */
  readonly signal?: AbortSignal;
  /** Called when the handler throws; the delivery is nacked and will come again. */
  readonly onError?: (err: unknown, delivery: Delivery) => void;
}

/** Messages the client remembers having handled, to drop at-least-once repeats. */
const SEEN_MAX = 10_000;

export class GatewayClient {
  readonly url: string;
  readonly #headers: Record<string, string>;
  readonly #seen = new Set<string>();

  constructor(opts: GatewayClientOptions = {}) {
    this.url = (opts.url ?? 'http://127.0.0.1:7070').replace(/\/+$/, '');
    this.#headers = {
      'content-type': 'application/json',
      ...(opts.token === undefined ? {} : { authorization: `Bearer ${opts.token}` }),
    };
  }

  async send(message: OutgoingMessage): Promise<SendResult> {
    const body = (await this.#call('POST', '/v1/messages', {
      ...message,
      idempotency_key: message.idempotency_key ?? uuidv7(),
    })) as Record<string, unknown>;
    return body.status === 'queued'
      ? (body as SendResult)
      : ({ ...body, status: 'delivered' } as SendResult);
  }

  /**
   * Hands each delivery to `handler`, one at a time, in the order received: acked once the
   * handler resolves, nacked (redelivered later) when it throws. A message handled before (an
   * at-least-once repeat) is acked without calling the handler again.
   */
  async receive(
    handler: (message: Message, delivery: Delivery) => Promise<void>,
    opts: ReceiveOptions = {},
  ): Promise<void> {
    const wait = opts.waitS ?? 30;
    const max = opts.max ?? 10;
    while (!opts.signal?.aborted) {
      let deliveries: Delivery[];
      try {
        ({ deliveries } = (await this.#call(
          'GET',
          `/v1/inbox?wait=${wait}&max=${max}`,
          undefined,
          opts.signal,
        )) as {
          deliveries: Delivery[];
        });
      } catch (err) {
        if (opts.signal?.aborted) return;
        const after = err instanceof GatewayClientError ? (err.retryAfterS ?? 1) : 1;
        await new Promise((r) => setTimeout(r, after * 1000));
        continue;
      }
      for (const d of deliveries) {
        if (this.#seen.has(d.message.message_id)) {
          await this.#settle('/v1/acks', d);
          continue;
        }
        try {
          await handler(d.message, d);
        } catch (err) {
          opts.onError?.(err, d);
          await this.#settle('/v1/nacks', d);
          continue;
        }
        this.#seen.add(d.message.message_id);
        if (this.#seen.size > SEEN_MAX) this.#seen.delete(this.#seen.values().next().value!);
        await this.#settle('/v1/acks', d);
      }
    }
  }

  /**
   * Acks or nacks one delivery. If that fails (the sidecar restarting), the delivery comes again
   * after its lease, and a handled one is then acked without calling the handler.
   */
  async #settle(path: '/v1/acks' | '/v1/nacks', d: Delivery): Promise<void> {
    await this.#call('POST', path, { delivery_ids: [d.delivery_id] }).catch(() => {});
  }

  heartbeat(): Promise<{ pending: number; critical_pending: number }> {
    return this.#call('POST', '/v1/heartbeat', {}) as Promise<{
      pending: number;
      critical_pending: number;
    }>;
  }

  /** A priority=CRIT journald entry through the sidecar; works with the adapter down. */
  async emergency(
    reason: string,
    message: string,
    fields?: Record<string, string | number | boolean>,
  ): Promise<void> {
    await this.#call('POST', '/v1/emergency', {
      reason,
      message,
      ...(fields === undefined ? {} : { fields }),
    });
  }

  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    signal?: AbortSignal,
  ): Promise<unknown> {
    const res = await fetch(this.url + path, {
      method,
      headers: this.#headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      ...(signal === undefined ? {} : { signal }),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { error: 'invalid_response', message: text.slice(0, 200) };
    }
    if (!res.ok) {
      const e = parsed as { error?: string; message?: string };
      const ra = Number(res.headers.get('retry-after'));
      throw new GatewayClientError(
        res.status,
        e.error ?? 'unknown',
        e.message ?? res.statusText,
        Number.isFinite(ra) && ra > 0 ? ra : undefined,
      );
    }
    return parsed;
  }
}
