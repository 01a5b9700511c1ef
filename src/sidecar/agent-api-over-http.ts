/**
 * The agent's operations over the sidecar's HTTP API, for `agent-gateway mcp`: the MCP tools
 * (mcp-tools.ts) run on this as they run on the service inside the sidecar. Each request is
 * rendered from the operation's declaration (protocol/agent-api.ts); a 2xx's JSON is passed on
 * as it came, a refusal thrown as the sidecar answered it, and a sidecar that does not answer is
 * a 503 `sidecar_unreachable`.
 */
import { Pool } from 'undici';
import {
  type AgentApi,
  type CallOptions,
  type Inputs,
  JsonText,
  OPERATION_LIST,
  type OperationName,
  type Result,
  renderRequest,
} from '../protocol/agent-api.js';
import { errorFromAnswer, GatewayError } from '../protocol/errors.js';
import { ASK_DEFAULT_TIMEOUT_MS } from '../protocol/limits.js';

/**
 * Beyond a long poll's wait, how long a call may take, ms: more than the sidecar's own deadline
 * for an adapter call (10 s), so that the sidecar's answer (a 503 with its reason) arrives
 * before this gives up.
 */
const CALL_DEADLINE_MS = 15_000;

export interface AgentApiOverHttp extends AgentApi {
  readonly url: string;
  close(): Promise<void>;
}

/** `url`: the sidecar's base URL (AGW_SIDECAR_URL), such as http://127.0.0.1:7070. */
export function agentApiOverHttp(url: string): AgentApiOverHttp {
  const u = new URL(url);
  const base = url.replace(/\/+$/, '');
  const prefix = u.pathname.replace(/\/+$/, '');
  // keep-alive on loopback: a tool call costs one request on an open connection
  const pool = new Pool(u.origin, { keepAliveTimeout: 30_000 });

  async function call<N extends OperationName>(
    name: N,
    input: Inputs[N],
    opts: CallOptions = {},
  ): Promise<Result<N>> {
    const { method, path, body } = renderRequest(name, input);
    const deadline = AbortSignal.timeout(waitMsOf(name, input) + CALL_DEADLINE_MS);
    const { signal } = opts;
    let status: number;
    let text: string;
    let retryAfterS: number | undefined;
    try {
      const res = await pool.request({
        method,
        path: prefix + path,
        headers: {
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...opts.trace,
        },
        ...(body === undefined ? {} : { body }),
        // a cancelled tool call closes this request, and the sidecar gives its poll up with it
        signal: signal === undefined ? deadline : AbortSignal.any([deadline, signal]),
      });
      status = res.statusCode;
      text = await res.body.text();
      const ra = Number(res.headers['retry-after']);
      retryAfterS = Number.isFinite(ra) && ra > 0 ? ra : undefined;
    } catch (err) {
      if (signal?.aborted) {
        throw new GatewayError('client_closed', 'the tool call was cancelled before the answer');
      }
      throw new GatewayError(
        'sidecar_unreachable',
        `the sidecar at ${base} did not answer ${method} ${path} (${(err as Error).message}); is it running?`,
        { retryAfterS: 2, cause: err },
      );
    }
    if (status >= 400) throw errorFromAnswer(status, text, retryAfterS, 'sidecar_unreachable');
    return new JsonText(text, status);
  }

  const api: Record<string, unknown> = {
    url: base,
    close: () => pool.close(),
  };
  for (const op of OPERATION_LIST) {
    api[op.name] = (input: never, opts?: CallOptions) => call(op.name, input, opts);
  }
  return api as unknown as AgentApiOverHttp;
}

/** How long a call may wait at the sidecar by its input: a poll's `wait`, an ask's timeout. */
function waitMsOf(name: OperationName, input: unknown): number {
  const { wait, timeout_ms } = input as { wait?: number; timeout_ms?: number };
  if (name === 'ask' || name === 'awaitReply') return timeout_ms ?? ASK_DEFAULT_TIMEOUT_MS;
  return (wait ?? 0) * 1000;
}
