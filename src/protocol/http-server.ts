/**
 * The HTTP shell both programs run in (docs/design/architecture.md, "The server shell"): one
 * `createServer` that listens over HTTP or TLS with the slow-client bounds, gives every request
 * an id (`x-request-id` in and out) and a logger that carries it, serves the route table, answers
 * errors from the one catalogue, runs the request hooks (onRequest, onResponse, onError) that
 * metrics, tracing and the audit log attach to, and drains on stop. The programs keep only their
 * wiring, their guard and their health.
 */
import { randomUUID } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { GatewayError, isGatewayError } from './errors.js';
import { sendError } from './http.js';
import type { RequestScope, RouteTable } from './router.js';

/** Node's defaults hold a socket for 300 s of headers trickled a byte at a time (slowloris). */
export interface ServerLimits {
  /** The headers must have arrived within this, ms. */
  readonly headersTimeoutMs: number;
  /** The whole request must have arrived within this, ms; a long poll's wait comes after it. */
  readonly requestTimeoutMs: number;
  /** How often Node checks the two timeouts above, ms. */
  readonly connectionsCheckingIntervalMs: number;
  /** An idle keep-alive connection is closed after this, ms (the Keep-Alive hint says it). */
  readonly keepAliveTimeoutMs: number;
  /** One connection past this is closed at once. */
  readonly maxConnections: number;
}

/** The bounds of a program that has no settings for them (the sidecar): the adapter's defaults. */
export const DEFAULT_LIMITS: ServerLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  connectionsCheckingIntervalMs: 5000,
  keepAliveTimeoutMs: 65_000,
  maxConnections: 4096,
};

/** PEM text of the server's certificate chain and key: the shell listens with TLS (https://). */
export interface TlsOptions {
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
  /**
   * Client certificates are asked for and checked against this CA (mutual TLS). A connection
   * without a valid one is still accepted, so that probes reach the public routes; the program's
   * guard refuses it elsewhere (`socket.authorized`).
   */
  readonly ca?: string | Buffer;
}

/** One request as the hooks see it. */
export interface RequestInfo {
  /** Its x-request-id: the caller's when it sent a usable one, else a new UUID. */
  readonly id: string;
  readonly method: string;
  /** The route's template (`/v1/channels/:name/messages`); undefined when no route matched. */
  readonly route: string | undefined;
  readonly req: IncomingMessage;
  /** performance.now() when it arrived. */
  readonly startedAt: number;
}

export interface Hooks {
  /** The route is found, before the guard: the request as it arrived. */
  onRequest(info: RequestInfo): void;
  /** The response has been sent, or its connection closed before it was; `status` as written. */
  onResponse(info: RequestInfo, status: number, ms: number): void;
  /** The handler (or the guard, or the body) refused or failed: before the error is answered. */
  onError(info: RequestInfo, err: GatewayError): void;
}

export interface ShellOptions<Who extends string, Ctx> {
  /** Names the program in what it answers and logs ("the adapter failed to handle ..."). */
  readonly program: string;
  readonly listen: { readonly host: string; readonly port: number };
  readonly tls?: TlsOptions;
  readonly limits: ServerLimits;
  readonly table: RouteTable<Who, Ctx>;
  /** Decides whether the caller may call the route, and what the handler knows of them. */
  readonly guard: (who: Who, req: IncomingMessage) => Ctx | Promise<Ctx>;
  readonly logger: Logger;
  /** An error the catalogue does not name, made into one it does (retryable storage failures). */
  readonly translate?: (err: unknown) => GatewayError | undefined;
}

export interface HttpShell {
  /** http(s)://host:port it listens on (the real port when asked for 0). */
  readonly url: string;
  /** Node's server, for what attaches to connections (connection-limits.ts). */
  readonly server: Server;
  /** True once close() began: new requests of guarded routes are refused by the guard. */
  readonly closing: boolean;
  /** Adds a hook; hooks run in the order added, and one that throws is logged, never fatal. */
  addHook<K extends keyof Hooks>(name: K, hook: Hooks[K]): void;
  /**
   * Stops listening and closes idle connections, runs `drain` (the program's own: answer parked
   * polls, finish commits, send the outbox) while requests in flight finish, waits for both at
   * most `graceMs`, then cuts what is left. Requests still in flight see their `signal` abort
   * when close begins, so a long poll answers 503 shutting_down instead of holding the stop.
   */
  close(graceMs: number, drain?: () => Promise<void>): Promise<void>;
}

/** A request id the caller sent: 1-128 visible ASCII characters; anything else is replaced. */
const USABLE_ID = /^[\x21-\x7e]{1,128}$/;

export async function createServer<Who extends string, Ctx>(
  opts: ShellOptions<Who, Ctx>,
): Promise<HttpShell> {
  const { limits, logger, table, guard } = opts;
  const hooks: { [K in keyof Hooks]: Hooks[K][] } = { onRequest: [], onResponse: [], onError: [] };
  const stopping = new AbortController();
  let closing = false;
  let inFlight = 0;
  let idle: (() => void) | undefined;

  const run = <K extends keyof Hooks>(name: K, ...args: Parameters<Hooks[K]>): void => {
    for (const hook of hooks[name]) {
      try {
        (hook as (...a: Parameters<Hooks[K]>) => void)(...args);
      } catch (err) {
        logger.error({ err, hook: name }, `a request hook (${name}) failed; the request went on`);
      }
    }
  };

  const serverOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: limits.connectionsCheckingIntervalMs,
  };
  const server: Server =
    opts.tls === undefined
      ? createHttpServer(serverOptions)
      : (createHttpsServer({
          ...serverOptions,
          cert: opts.tls.cert,
          key: opts.tls.key,
          ...(opts.tls.ca === undefined
            ? {}
            : { ca: opts.tls.ca, requestCert: true, rejectUnauthorized: false }),
        }) as unknown as Server);
  // Longer than any client's idle timeout (undici and fetch follow the Keep-Alive hint this
  // sends, less a margin), so the client closes an idle connection first and never sends a
  // request on one the server is closing.
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.maxConnections = limits.maxConnections;

  server.on('request', (req, res) => {
    inFlight++;
    const sent = req.headers['x-request-id'];
    const id = typeof sent === 'string' && USABLE_ID.test(sent) ? sent : randomUUID();
    res.setHeader('x-request-id', id);
    if (closing) res.setHeader('connection', 'close');
    const scope = new Scope(id, req, logger, stopping.signal, res);
    res.once('close', () => {
      if (hooks.onResponse.length > 0) {
        run('onResponse', scope.info(), res.statusCode, performance.now() - scope.startedAt);
      }
      if (--inFlight === 0) idle?.();
    });
    table
      .serve(req, res, guard, scope, hooks.onRequest.length > 0 ? onRequest : undefined)
      .catch((thrown: unknown) => {
        // The client went away before its answer (it timed out, or gave up a poll): nothing
        // to answer and nothing wrong here, so no stack.
        if (res.destroyed && !res.writableFinished) {
          const e = thrown as { code?: unknown; message?: unknown };
          scope.log.debug(
            { method: req.method, url: req.url, reason: e?.code ?? e?.message },
            'the client went away before its answer',
          );
          return;
        }
        if (res.headersSent) return void res.destroy();
        let err = isGatewayError(thrown) ? thrown : opts.translate?.(thrown);
        if (err === undefined) {
          scope.log.error({ err: thrown, method: req.method, url: req.url }, 'request failed');
          err = new GatewayError('internal', `the ${opts.program} failed to handle the request`);
        } else if (err.code === 'client_closed' && closing) {
          // the call was given up because the program stops, not by its client
          err = new GatewayError(
            'shutting_down',
            `the ${opts.program} is shutting down; retry shortly`,
          );
        }
        if (hooks.onError.length > 0) run('onError', scope.info(), err);
        sendError(res, err);
      });
  });
  const onRequest = (scope: RequestScope): void => run('onRequest', (scope as Scope).info());

  const url = await listen(server, opts.listen, opts.tls === undefined ? 'http' : 'https');

  return {
    url,
    server,
    get closing() {
      return closing;
    },
    addHook(name, hook) {
      (hooks[name] as unknown[]).push(hook);
    },
    async close(graceMs, drain) {
      if (closing) return;
      closing = true;
      server.close();
      server.closeIdleConnections();
      stopping.abort();
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
      const quiet =
        inFlight === 0
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
              idle = resolve;
            });
      await Promise.race([
        Promise.all([
          drain?.().catch((err: unknown) => logger.error({ err }, 'drain failed')),
          quiet,
        ]),
        deadline,
      ]);
      server.closeAllConnections();
    },
  };
}

/** What the route table and the handler get of the shell for one request. */
class Scope implements RequestScope {
  readonly startedAt = performance.now();
  route: string | undefined;
  #log: Logger | undefined;
  #signal: AbortSignal | undefined;

  constructor(
    readonly id: string,
    readonly req: IncomingMessage,
    readonly logger: Logger,
    readonly stopping: AbortSignal,
    readonly res: import('node:http').ServerResponse,
  ) {}

  /** A child logger with the request's id, made when first used: most requests never log. */
  get log(): Logger {
    this.#log ??= this.logger.child({ reqId: this.id });
    return this.#log;
  }

  /**
   * Aborts when the client closes its request before the answer, or when the program stops;
   * made when first asked for, since only calls that wait on something need it.
   */
  get signal(): AbortSignal {
    if (this.#signal !== undefined) return this.#signal;
    const controller = new AbortController();
    const abort = () => controller.abort();
    if (this.res.destroyed || this.stopping.aborted) abort();
    else {
      this.res.once('close', () => {
        this.stopping.removeEventListener('abort', abort);
        if (!this.res.writableFinished) abort();
      });
      this.stopping.addEventListener('abort', abort, { once: true });
    }
    this.#signal = controller.signal;
    return this.#signal;
  }

  info(): RequestInfo {
    return {
      id: this.id,
      method: this.req.method ?? '',
      route: this.route,
      req: this.req,
      startedAt: this.startedAt,
    };
  }
}

/** Listens on host:port (port 0: any free one); resolves with the URL it listens on. */
function listen(
  server: Server,
  at: { host: string; port: number },
  scheme: 'http' | 'https',
): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      server.off('error', reject);
      const address = server.address() as AddressInfo;
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`${scheme}://${host}:${address.port}`);
    });
  });
}
