/**
 * One route table per program, declared in one place (fastify's style): method and path, who
 * may call it, the body's byte bound and parser, and the handler. The table answers 404 for a
 * path no route has and 405 for a path whose routes take other methods; the program decides
 * what its "who" names mean (a token, the alerts_to agent, anyone on loopback).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { GatewayError } from './errors.js';
import { assertJsonContentType, carriesBody, readBody, sendJson } from './http.js';

/** What a handler answers: JSON (an object, or text that already is JSON), status 200 by default. */
export interface Answer {
  readonly status?: number;
  readonly body: string | object;
  /** Sent as Retry-After. */
  readonly retryAfterS?: number;
  /** A body that is not JSON (Prometheus text). */
  readonly contentType?: string;
}

export interface Call<Ctx, Body> {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** The path's :parameters, decoded. */
  readonly params: Readonly<Record<string, string>>;
  readonly query: URLSearchParams;
  /** What the route's body parser made of the body. */
  readonly body: Body;
  /** What the program's guard made of `who` (the authenticated agent, say). */
  readonly ctx: Ctx;
  /** The request's id (x-request-id) and a logger that carries it. */
  readonly requestId: string;
  readonly log: Logger;
  /** Aborts when the client gives the request up before its answer, or the program stops. */
  readonly signal: AbortSignal;
}

/** What the server shell (http-server.ts) keeps of one request while the table serves it. */
export interface RequestScope {
  readonly id: string;
  readonly log: Logger;
  readonly signal: AbortSignal;
  /** Set by the table once the route is found: its template, for hooks and metrics. */
  route: string | undefined;
}

export interface Route<Who extends string, Ctx, Body = unknown> {
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** `/v1/inbox`, or with parameters: `/v1/dead-letters/:id/replay`. */
  readonly path: string;
  readonly who: Who;
  /** The body's byte bound and parser (its schema); a GET has none. */
  readonly body?: { readonly limit: number; readonly parse: (raw: Buffer) => Body };
  /** Answers the call; `undefined`: the handler wrote the response itself (the MCP transport). */
  readonly handler: (call: Call<Ctx, Body>) => Answer | undefined | Promise<Answer | undefined>;
}

/** Declares a route, keeping its body's type between the parser and the handler. */
export function route<Who extends string, Ctx, Body = undefined>(
  r: Route<Who, Ctx, Body>,
): Route<Who, Ctx, unknown> {
  return r as Route<Who, Ctx, unknown>;
}

interface Compiled<R> {
  readonly route: R;
  readonly pattern: RegExp | undefined;
  readonly names: readonly string[];
}

export class RouteTable<Who extends string, Ctx> {
  readonly #exact = new Map<string, Compiled<Route<Who, Ctx>>[]>();
  readonly #patterns: Compiled<Route<Who, Ctx>>[] = [];

  constructor(readonly routes: readonly Route<Who, Ctx>[]) {
    for (const r of routes) {
      const names: string[] = [];
      if (!r.path.includes('/:')) {
        const list = this.#exact.get(r.path) ?? [];
        list.push({ route: r, pattern: undefined, names });
        this.#exact.set(r.path, list);
        continue;
      }
      const source = r.path.replace(/:([a-z_]+)/g, (_, name: string) => {
        names.push(name);
        return '([^/]+)';
      });
      this.#patterns.push({ route: r, pattern: new RegExp(`^${source}$`), names });
    }
  }

  /** The route for this method and path, with its parameters decoded; 404 or 405 otherwise. */
  find(
    method: string | undefined,
    path: string,
  ): { route: Route<Who, Ctx>; params: Record<string, string> } {
    let candidates = this.#exact.get(path)?.map((c) => ({ c, m: [] as string[] }));
    if (candidates === undefined) {
      candidates = [];
      for (const c of this.#patterns) {
        const m = c.pattern!.exec(path);
        if (m !== null) candidates.push({ c, m: m.slice(1) });
      }
    }
    if (candidates.length === 0)
      throw new GatewayError('not_found', `no endpoint ${method} ${path}`);
    const hit = candidates.find(({ c }) => c.route.method === method);
    if (hit === undefined) {
      const takes = [...new Set(candidates.map(({ c }) => c.route.method))].join(' or ');
      throw new GatewayError('method_not_allowed', `${path} takes ${takes}, not ${method}`);
    }
    const params: Record<string, string> = {};
    hit.c.names.forEach((name, i) => {
      try {
        params[name] = decodeURIComponent(hit.m[i]!);
      } catch {
        throw new GatewayError(
          'invalid_request',
          `${name}: not a valid percent-encoded path segment`,
          {
            field: name,
          },
        );
      }
    });
    return { route: hit.c.route, params };
  }

  /**
   * Serves one request: finds its route, lets `guard` decide whether the caller may (and what
   * it knows of them), reads and parses the body, runs the handler, sends the answer. Errors
   * are thrown for the shell to answer from the catalogue. `onRouted` runs once the route is
   * known, before the guard (the shell's onRequest hooks).
   */
  async serve(
    req: IncomingMessage,
    res: ServerResponse,
    guard: (who: Who, req: IncomingMessage) => Ctx | Promise<Ctx>,
    scope: RequestScope,
    onRouted?: (scope: RequestScope) => void,
  ): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const { route: r, params } = this.find(req.method, path);
    scope.route = r.path;
    onRouted?.(scope);
    const guarded = guard(r.who, req);
    const ctx = guarded instanceof Promise ? await guarded : guarded;
    // a POST to a route that reads a body, or one that sends a body anyway, is JSON
    // (docs/reference/errors.md, `not_json`: 415 for one that is not): the adapter stored
    // `text/plain` bodies before
    if (req.method === 'POST' && (r.body !== undefined || carriesBody(req))) {
      assertJsonContentType(req);
    }
    const body = r.body === undefined ? undefined : r.body.parse(await readBody(req, r.body.limit));
    const query = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    const answer = await r.handler({
      req,
      res,
      params,
      query,
      body,
      ctx,
      requestId: scope.id,
      get log() {
        return scope.log;
      },
      get signal() {
        return scope.signal;
      },
    });
    if (answer !== undefined) send(res, answer);
  }
}

export function send(res: ServerResponse, answer: Answer): void {
  if (answer.retryAfterS !== undefined) res.setHeader('retry-after', String(answer.retryAfterS));
  if (answer.contentType !== undefined) {
    res.writeHead(answer.status ?? 200, { 'content-type': answer.contentType });
    res.end(answer.body);
    return;
  }
  sendJson(res, answer.status ?? 200, answer.body);
}
