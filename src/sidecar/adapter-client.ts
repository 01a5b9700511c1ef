/**
 * The sidecar's connection to the adapter: an undici Pool with keep-alive, a deadline on every
 * call, and the error catalogue's rule for what may be retried (isRetryableAnswer): no answer,
 * or an answer whose code the catalogue marks retryable, is retried (the sidecar queues the
 * message); a permanent one (400, 401, 403, 404, 409, 413, integrity_error) is passed back to
 * the agent as it is, never queued. It also keeps when the adapter last answered and the last
 * failure, for /v1/status.
 *
 * Its credentials change without a restart (credential-files.ts): a new token is in the headers
 * of every call made after it; new TLS files get new pools, which new calls take, while the old
 * pools are closed gracefully: undici's close() waits for what they carry, a parked long poll
 * included, then ends their connections. Nothing in flight is cut.
 */

import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { isRetryableAnswer } from '../protocol/errors.js';
import { SIDECAR_POLL_CONNECTIONS } from '../protocol/limits.js';
import type { TraceContext } from '../protocol/trace-context.js';
import { type AdapterTls, tlsProblem } from './adapter-tls.js';
import { Pool } from './undici-pool.js';

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

/**
 * A call its caller gave up (its `signal` aborted: the agent closed a poll before the answer).
 * Not a failure of the adapter's: it is not kept as the last error, and the breaker does not
 * count it (circuit-breaker.ts).
 */
export class CallAborted extends Error {
  override name = 'CallAborted';
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
  /** TLS options of new connections to an https:// adapter (adapter-tls.ts). Default none. */
  readonly tls?: AdapterTls;
  /** Where a failed TLS handshake is told, once per problem until a call is answered. */
  readonly logger?: Pick<Logger, 'warn'>;
}

export class AdapterClient {
  readonly url: string;
  /** When the adapter last answered anything, ms since the epoch. */
  lastContact: number | null = null;
  /** The last call that failed or was answered retryably, in a sentence. */
  lastError: string | null = null;
  #pool: Pool;
  /** Long polls wait up to 30 s each: on a pool of their own they never starve sends. */
  #polls: Pool;
  /** Pools replaced by useTls, until what they carried has finished. */
  readonly #retiring = new Set<Promise<void>>();
  /** The headers of every call, made once a token: undici reads them, never changes them. */
  #getHeaders: Record<string, string> = {};
  #postHeaders: Record<string, string> = {};
  readonly #timeoutMs: number;
  readonly #connections: number;
  readonly #connectTimeoutMs: number;
  readonly #https: boolean;
  readonly #logger: Pick<Logger, 'warn'> | undefined;
  /** The TLS problem last told, so that a probe every few seconds tells it once. */
  #toldTls: string | undefined;

  constructor(opts: AdapterClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.#https = this.url.startsWith('https:');
    this.#connections = opts.connections ?? 16;
    this.#connectTimeoutMs = opts.connectTimeoutMs ?? 2_000;
    this.#logger = opts.logger;
    this.#pool = this.#newPool(this.#connections, opts.tls);
    // the adapter takes AGW_MAX_POLLS_PER_AGENT (32) polls of an agent at once: more queue here
    this.#polls = this.#newPool(SIDECAR_POLL_CONNECTIONS, opts.tls);
    this.useToken(opts.token);
    this.#timeoutMs = opts.timeoutMs ?? 10_000;
  }

  #newPool(connections: number, tls: AdapterTls | undefined): Pool {
    // each pool has its own TLS session cache: a new one never resumes a session of the old
    // identity, so its connections show the new certificate
    const connect = this.#https && tls !== undefined ? tls : {};
    return new Pool(this.url, {
      connections,
      keepAliveTimeout: 30_000,
      connect: { ...connect, timeout: this.#connectTimeoutMs } as UndiciConnect,
    });
  }

  /** The token of every call from now on (a call already sent keeps the one it carries). */
  useToken(token: string): void {
    const authorization = `Bearer ${token}`;
    this.#getHeaders = { authorization };
    this.#postHeaders = { authorization, 'content-type': 'application/json' };
  }

  /**
   * New connections use `tls` from now on: new pools take every call made after this, and the
   * old ones close once what they carry has finished (a long poll parked at the adapter
   * answers as usual first). Resolves when the old pools have closed.
   */
  useTls(tls: AdapterTls): Promise<void> {
    const old = [this.#pool, this.#polls];
    this.#pool = this.#newPool(this.#connections, tls);
    this.#polls = this.#newPool(SIDECAR_POLL_CONNECTIONS, tls);
    const closed: Promise<void> = Promise.all(old.map((p) => p.close())).then(
      () => {
        this.#retiring.delete(closed);
      },
      () => {
        this.#retiring.delete(closed);
      },
    );
    this.#retiring.add(closed);
    return closed;
  }

  /**
   * One call; resolves with any HTTP answer, rejects with AdapterUnreachable without one, or
   * with CallAborted once `signal` aborts (the request is cut, its connection closed: a parked
   * poll then ends at the adapter without leasing).
   */
  async request(
    method: 'GET' | 'POST',
    path: string,
    body?: string | Buffer,
    timeoutMs = this.#timeoutMs,
    signal?: AbortSignal,
    trace?: TraceContext,
  ): Promise<AdapterResponse> {
    try {
      const pool = isLongPoll(path) ? this.#polls : this.#pool;
      const base = body === undefined ? this.#getHeaders : this.#postHeaders;
      // the caller's span as the call's parent (tracing on only): a header object of its own
      const headers = trace === undefined ? base : { ...base, ...trace };
      const res = await exchange(pool, method, path, headers, body, timeoutMs, signal);
      const ra = Number(res.retryAfter);
      const retryable = res.status >= 400 && isRetryableAnswer(res.status, errorCode(res.text));
      this.#answered();
      if (retryable) this.lastError = `${method} ${path}: the adapter answered ${res.status}`;
      return {
        status: res.status,
        body: res.text,
        retryAfterS: Number.isFinite(ra) && ra > 0 ? ra : undefined,
        retryable,
      };
    } catch (err) {
      if (err instanceof CallAborted) throw err;
      const e = new AdapterUnreachable(`${method} ${this.url}${path}: ${(err as Error).message}`, {
        cause: err,
      });
      this.lastError = e.message;
      this.#tellTls(err);
      throw e;
    }
  }

  /** GET /health without the token, for the readiness gate and recovery probes. */
  async health(timeoutMs = 2000): Promise<boolean> {
    try {
      const res = await exchange(this.#pool, 'GET', '/health', {}, undefined, timeoutMs, undefined);
      this.#answered();
      return res.status === 200;
    } catch (err) {
      // the start gate probes with this alone: a certificate problem is kept for /v1/status
      if (this.#tellTls(err)) this.lastError = `GET ${this.url}/health: ${(err as Error).message}`;
      return false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#pool.close(), this.#polls.close(), ...this.#retiring]);
  }

  #answered(): void {
    this.lastContact = Date.now();
    this.#toldTls = undefined;
  }

  /**
   * A failed TLS handshake is a warning, told once until the adapter answers again or the
   * problem changes: a sidecar that cannot trust its adapter otherwise only looks unreachable.
   * True when `err` was one.
   */
  #tellTls(err: unknown): boolean {
    const problem = tlsProblem(err);
    if (problem === undefined) return false;
    if (this.#toldTls !== problem.code) {
      this.#toldTls = problem.code;
      this.#logger?.warn(
        { adapter: this.url, code: problem.code },
        `TLS with the adapter at ${this.url} failed: ${problem.sentence}`,
      );
    }
    return true;
  }
}

/** undici's `connect` options: a connect timeout, and tls.connect's options for https. */
type UndiciConnect = NonNullable<ConstructorParameters<typeof Pool>[1]>['connect'];

/** The catalogue code of an error answer (`{"error": code}`), if it has one. */
function errorCode(body: string): unknown {
  try {
    return (JSON.parse(body) as { error?: unknown } | null)?.error;
  } catch {
    return undefined; // not ours: a proxy's page
  }
}

/** What one exchange brought back. */
interface Exchanged {
  readonly status: number;
  /** The Retry-After header as sent, if any. */
  readonly retryAfter: string | string[] | undefined;
  readonly text: string;
}

/**
 * One request over `pool`, its answer read whole, within a deadline of `timeoutMs` for the
 * whole call (a queued request's wait for a connection included); rejects without an answer.
 *
 * This is undici's `dispatch` with a handler of our own rather than `pool.request` with
 * `AbortSignal.timeout`: the sidecar makes two calls per message it carries, and `request`
 * builds a Readable stream, an async resource and an abort listener for each, while
 * AbortSignal.timeout leaves a timer armed for the whole deadline that, firing 10 s later,
 * builds a DOMException with its stack (~10% of the sidecar's CPU per message, measured with bench/path/trip.mjs).
 * Here one timer is armed and cleared with the answer.
 */
function exchange(
  pool: Pool,
  method: 'GET' | 'POST',
  path: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<Exchanged> {
  if (signal?.aborted) return Promise.reject(aborted());
  return new Promise((resolve, reject) => {
    pool.dispatch(
      body === undefined ? { method, path, headers } : { method, path, headers, body },
      new ExchangeHandler(resolve, reject, timeoutMs, signal),
    );
  });
}

function aborted(): CallAborted {
  return new CallAborted('the caller gave up the call (its request closed before the answer)');
}

class ExchangeHandler implements Dispatcher.DispatchHandler {
  readonly #resolve: (answer: Exchanged) => void;
  readonly #reject: (err: Error) => void;
  readonly #timer: NodeJS.Timeout;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.#end(aborted());
  #controller: Dispatcher.DispatchController | undefined;
  /** Why the call ended early (its deadline, or its caller's abort), once it has. */
  #reason: Error | undefined;
  #done = false;
  #status = 0;
  #retryAfter: string | string[] | undefined;
  #chunks: Buffer[] = [];
  #size = 0;

  constructor(
    resolve: (a: Exchanged) => void,
    reject: (err: Error) => void,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ) {
    this.#resolve = resolve;
    this.#reject = reject;
    this.#timer = setTimeout(() => this.#expire(), timeoutMs);
    this.#timer.unref();
    // only polls carry one (service.ts): sends and acks keep their one timer and no listener
    this.#signal = signal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.#reason !== undefined) {
      controller.abort(this.#reason);
      return;
    }
    // (again when undici retries a request at the head of a pipeline: start afresh)
    this.#controller = controller;
    this.#chunks = [];
    this.#size = 0;
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (statusCode < 200) return; // 1xx: the answer is still to come
    this.#status = statusCode;
    this.#retryAfter = headers['retry-after'];
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#size += chunk.length;
  }

  onResponseEnd(): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#resolve({ status: this.#status, retryAfter: this.#retryAfter, text: this.#text() });
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#reject(err);
  }

  #expire(): void {
    // the message AbortSignal.timeout's error had, for /v1/status's last_error
    const err = new Error('The operation was aborted due to timeout');
    err.name = 'TimeoutError';
    this.#end(err);
  }

  /** Ends the call early: its request cut (its connection closed), the caller told why. */
  #end(err: Error): void {
    if (this.#done) return;
    this.#reason = err;
    this.#controller?.abort(err);
    // a request still waiting for a connection is aborted when it gets one (onRequestStart)
    this.onResponseError(this.#controller as Dispatcher.DispatchController, err);
  }

  /** The body as UTF-8 text, a byte-order mark left out (as undici's body.text()). */
  #text(): string {
    if (this.#size === 0) return '';
    const b =
      this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size);
    const bom = b.length > 2 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf;
    return b.toString('utf8', bom ? 3 : 0);
  }
}

/** A call that may park at the adapter: an inbox poll, or an ask's wait for its reply. */
function isLongPoll(path: string): boolean {
  return path.startsWith('/v1/inbox') || /^\/v1\/messages\/[^/?]+\/reply(\?|$)/.test(path);
}
