/**
 * The sidecar's operations over its own HTTP API, for `agent-gateway mcp`: the MCP tools
 * (mcp-tools.ts) run on this as they run on the service inside the sidecar, so each tool is
 * written once. Each call answers what the endpoint answered (status, JSON body, Retry-After);
 * a sidecar that does not answer is a 503 `sidecar_unreachable`.
 */
import { Pool } from 'undici';
import type { LeaseExtension, Nack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import type { Answer } from '../protocol/router.js';
import type { McpOperations } from './mcp-tools.js';

/**
 * Beyond a long poll's wait, how long a call may take, ms: more than the sidecar's own deadline
 * for an adapter call (10 s), so that the sidecar's answer (a 503 with its reason) arrives
 * before this gives up.
 */
const CALL_DEADLINE_MS = 15_000;

export class SidecarHttpOperations implements McpOperations {
  readonly url: string;
  readonly #pool: Pool;
  readonly #prefix: string;

  /** `url`: the sidecar's base URL (AGW_SIDECAR_URL), such as http://127.0.0.1:7070. */
  constructor(url: string) {
    const u = new URL(url);
    this.url = url.replace(/\/+$/, '');
    this.#prefix = u.pathname.replace(/\/+$/, '');
    // keep-alive on loopback: a tool call costs one request on an open connection
    this.#pool = new Pool(u.origin, { keepAliveTimeout: 30_000 });
  }

  send(envelope: Record<string, unknown>): Promise<Answer> {
    return this.#call('POST', '/v1/messages', envelope);
  }

  inbox(
    waitS: number,
    max: number,
    ack?: readonly number[],
    signal?: AbortSignal,
  ): Promise<Answer> {
    const path = `/v1/inbox?wait=${waitS}&max=${max}`;
    // a cancelled tool call closes this request, and the sidecar gives its poll up with it
    if (ack === undefined) return this.#call('GET', path, undefined, waitS, signal);
    return this.#call('POST', path, { delivery_ids: ack }, waitS, signal);
  }

  ack(ids: readonly number[]): Promise<Answer> {
    return this.#call('POST', '/v1/acks', { delivery_ids: ids });
  }

  nack(n: Nack): Promise<Answer> {
    const reason = n.reason === null ? {} : { reason: n.reason };
    return this.#call('POST', '/v1/nacks', { delivery_ids: n.ids, retry: n.retry, ...reason });
  }

  extendLeases(body: LeaseExtension): Promise<Answer> {
    return this.#call('POST', '/v1/leases', { delivery_ids: body.ids, extend_ms: body.extendMs });
  }

  messageStatus(messageId: string): Promise<Answer> {
    return this.#call('GET', `/v1/messages/${encodeURIComponent(messageId)}`);
  }

  me(): Promise<Answer> {
    return this.#call('GET', '/v1/me');
  }

  heartbeat(): Promise<Answer> {
    return this.#call('POST', '/v1/heartbeat', {});
  }

  readChannel(name: string, after: number, limit: number): Promise<Answer> {
    const query = `after=${after}&limit=${limit}`;
    return this.#call('GET', `/v1/channels/${encodeURIComponent(name)}/messages?${query}`);
  }

  emergency(body: { reason: string; message: string }): Promise<Answer> {
    return this.#call('POST', '/v1/emergency', body);
  }

  close(): Promise<void> {
    return this.#pool.close();
  }

  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: object,
    waitS = 0,
    signal?: AbortSignal,
  ): Promise<Answer> {
    const deadline = AbortSignal.timeout(waitS * 1000 + CALL_DEADLINE_MS);
    try {
      const res = await this.#pool.request({
        method,
        path: this.#prefix + path,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: signal === undefined ? deadline : AbortSignal.any([deadline, signal]),
      });
      const text = await res.body.text();
      const ra = Number(res.headers['retry-after']);
      return {
        status: res.statusCode,
        body: text,
        ...(Number.isFinite(ra) && ra > 0 ? { retryAfterS: ra } : {}),
      };
    } catch (err) {
      if (signal?.aborted) {
        throw new GatewayError('client_closed', 'the tool call was cancelled before the answer');
      }
      throw new GatewayError(
        'sidecar_unreachable',
        `the sidecar at ${this.url} did not answer ${method} ${path} (${(err as Error).message}); is it running?`,
        { retryAfterS: 2, cause: err },
      );
    }
  }
}
