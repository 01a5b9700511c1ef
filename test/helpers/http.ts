/**
 * JSON requests for tests, with an agent's token when asked.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, request, type ServerResponse } from 'node:http';
import { tokenOf } from './topology.js';

/** A JSON answer of any shape: tests index into it freely. */
// biome-ignore lint/suspicious/noExplicitAny: test bodies are checked by the assertions that read them
export type Json = any;

/** A JSON request with an agent's token. */
export async function call(
  url: string,
  method: string,
  path: string,
  opts: { agent?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...opts.headers };
  if (opts.agent !== undefined) headers.authorization = `Bearer ${tokenOf(opts.agent)}`;
  const res = await fetch(url + path, {
    method,
    headers,
    body: opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body)),
  });
  const text = await res.text();
  let body: Json = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body, headers: res.headers };
}

/** POST /v1/messages as `agent`: expects 201, answers the message_id. */
export async function sendAs(
  url: string,
  agent: string,
  to: string,
  kind = 'status',
  payload: object = {},
): Promise<string> {
  const r = await call(url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to, kind, payload },
  });
  if (r.status !== 201)
    throw new Error(`send as ${agent} to ${to}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.message_id as string;
}

/** GET /v1/inbox as `agent`: expects 200, answers the deliveries. */
export async function pollAs(
  url: string,
  agent: string,
  { wait = 0, max = 10 }: { wait?: number; max?: number } = {},
): Promise<Json[]> {
  const r = await call(url, 'GET', `/v1/inbox?wait=${wait}&max=${max}`, { agent });
  if (r.status !== 200) throw new Error(`poll as ${agent}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.deliveries as Json[];
}

/**
 * Passes a request on to `target` as it came and its answer back as it is (a test's proxy). A
 * request its client gives up before the answer is given up upstream too, as a real proxy does.
 * `onEnd`: told the status answered, or 'closed' when the client went away first.
 */
export function forward(
  target: string,
  req: IncomingMessage,
  res: ServerResponse,
  onEnd?: (outcome: number | 'closed') => void,
): void {
  const up = request(
    target + (req.url ?? '/'),
    { method: req.method, headers: req.headers },
    (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    },
  );
  up.on('error', () => res.destroy());
  res.once('close', () => {
    if (res.writableFinished) return onEnd?.(res.statusCode);
    onEnd?.('closed');
    up.destroy();
  });
  req.pipe(up);
}

/**
 * A loopback proxy to `target` that records each request as `METHOD url` (query included), in
 * arrival order, in `seen`, and as each one passed on ends, how (`METHOD url -> 200`, or
 * `-> closed` when its client gave it up before the answer), in `ended`. `intercept` may answer a
 * request itself (it returns true) instead of passing it on.
 */
export async function recordingProxy(
  target: string,
  intercept?: (req: IncomingMessage, res: ServerResponse) => boolean,
) {
  const seen: string[] = [];
  const ended: string[] = [];
  const server = createServer((req, res) => {
    const what = `${req.method} ${req.url}`;
    seen.push(what);
    if (intercept?.(req, res) !== true)
      forward(target, req, res, (outcome) => ended.push(`${what} -> ${outcome}`));
  });
  const url = await new Promise<string>((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      resolve(`http://127.0.0.1:${port}`);
    }),
  );
  return {
    url,
    seen,
    ended,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
