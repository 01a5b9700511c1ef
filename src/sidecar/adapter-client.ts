/**
 * The sidecar's connection to the adapter: an undici Pool with keep-alive, a deadline on every
 * call, and the error catalogue's rule for what may be retried (isRetryableAnswer): no answer,
 * or an answer whose code the catalogue marks retryable, is retried (the sidecar queues the
 * message); a permanent one (400, 401, 403, 404, 409, 413, integrity_error) is passed back to
 * the agent as it is, never queued. It also keeps when the adapter last answered and the last
 * failure, for /v1/status.
 */
import { Pool } from 'undici';
import { isRetryableAnswer } from '../protocol/errors.js';
import { SIDECAR_POLL_CONNECTIONS } from '../protocol/limits.js';

export interface AdapterResponse {
  readonly status: number;
  readonly body: string;
  readonly retryAfterS: number | undefined;
  /** The same request may succeed later unchanged (the catalogue's flag for its code). */
  readonly retryable: boolean;
}

/** The adapter answered, but retryably (the catalogue's rule): a failure for the breaker. */
export class RetryableAnswer extends Error {
  override name = 'RetryableAnswer';
  constructor(readonly response: AdapterResponse) {
    super(`the adapter answered ${response.status}`);
  }
}

/** A call that did not get an answer (connection refused, reset, timeout). */
export class AdapterUnreachable extends Error {
  override name = 'AdapterUnreachable';
}

export interface AdapterClientOptions {
  readonly url: string;
  readonly token: string;
  /** Connections kept to the adapter for calls other than long polls. Default 16. */
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
  /** When the adapter last answered anything, ms since the epoch. */
  lastContact: number | null = null;
  /** The last call that failed or was answered retryably, in a sentence. */
  lastError: string | null = null;
  readonly #pool: Pool;
  /** Long polls wait up to 30 s each: on a pool of their own they never starve sends. */
  readonly #polls: Pool;
  readonly #auth: string;
  readonly #timeoutMs: number;

  constructor(opts: AdapterClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    const pool = (connections: number) =>
      new Pool(this.url, {
        connections,
        keepAliveTimeout: 30_000,
        connect: { timeout: opts.connectTimeoutMs ?? 2_000 },
      });
    this.#pool = pool(opts.connections ?? 16);
    // the adapter takes AGW_MAX_POLLS_PER_AGENT (32) polls of an agent at once: more queue here
    this.#polls = pool(SIDECAR_POLL_CONNECTIONS);
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
      const pool = path.startsWith('/v1/inbox') ? this.#polls : this.#pool;
      const res = await pool.request({
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
      const retryable = res.statusCode >= 400 && isRetryableAnswer(res.statusCode, errorCode(text));
      this.lastContact = Date.now();
      if (retryable) this.lastError = `${method} ${path}: the adapter answered ${res.statusCode}`;
      return {
        status: res.statusCode,
        body: text,
        retryAfterS: Number.isFinite(ra) && ra > 0 ? ra : undefined,
        retryable,
      };
    } catch (err) {
      const e = new AdapterUnreachable(`${method} ${this.url}${path}: ${(err as Error).message}`, {
        cause: err,
      });
      this.lastError = e.message;
      throw e;
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
      this.lastContact = Date.now();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#pool.close(), this.#polls.close()]);
  }
}

/** The catalogue code of an error answer (`{"error": code}`), if it has one. */
function errorCode(body: string): unknown {
  try {
    return (JSON.parse(body) as { error?: unknown } | null)?.error;
  } catch {
    return undefined; // not ours: a proxy's page
  }
}
