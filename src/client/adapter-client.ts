/**
 * The sidecar's HTTP client for the adapter: an undici Pool with keep-alive, a deadline on
 * every call, and one rule for what may be retried. Network errors, 5xx, 429 and 503 are
 * retryable (the sidecar queues the message); 400, 401, 403, 404, 409 and 413 are permanent
 * (passed back to the agent as they are, never queued).
 */
import { Pool } from 'undici';

export interface AdapterResponse {
  readonly status: number;
  readonly body: string;
  readonly retryAfterS: number | undefined;
}

/** A call that did not get an answer (connection refused, reset, timeout). */
export class AdapterUnreachable extends Error {
  override name = 'AdapterUnreachable';
}

/** An answer the same request may get right later: 5xx, 429. */
export function isRetryable(status: number): boolean {
  return status >= 500 || status === 429;
}

export interface AdapterClientOptions {
  readonly url: string;
  readonly token: string;
  /** Connections kept to the adapter. Default 16. */
  readonly connections?: number;
  /** Deadline of one call, ms. Default 10,000. */
  readonly timeoutMs?: number;
  /**
   * Deadline of a new connection (name lookup and TCP handshake), ms. Default 2,000: on a pod
   * network a handshake takes well under a millisecond, and an adapter whose address has
   * vanished (a stopped container, a Service without endpoints behind a dropping firewall)
   * would otherwise hold every call for the whole call deadline.
   */
  readonly connectTimeoutMs?: number;
}

export class AdapterClient {
  readonly url: string;
  readonly #pool: Pool;
  readonly #auth: string;
  readonly #timeoutMs: number;

  constructor(opts: AdapterClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.#pool = new Pool(this.url, {
      connections: opts.connections ?? 16,
      keepAliveTimeout: 30_000,
      connect: { timeout: opts.connectTimeoutMs ?? 2_000 },
    });
    this.#auth = `Bearer ${opts.token}`;
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
  }

  /** One call; resolves with any HTTP answer, rejects with AdapterUnreachable without one. */
  async request(
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    timeoutMs = this.#timeoutMs,
  ): Promise<AdapterResponse> {
    try {
      const res = await this.#pool.request({
        method,
        path,
        headers: {
          authorization: this.#auth,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.body.text();
      const ra = Number(res.headers['retry-after']);
      return {
        status: res.statusCode,
        body: text,
        retryAfterS: Number.isFinite(ra) && ra > 0 ? ra : undefined,
      };
    } catch (err) {
      throw new AdapterUnreachable(`${method} ${this.url}${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /** GET /health without the token, for the readiness gate and recovery probes. */
  async health(timeoutMs = 2000): Promise<boolean> {
    try {
      const res = await this.#pool.request({
        method: 'GET',
        path: '/health',
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body.dump();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}
