/**
 * JSON requests for tests, with an agent's token when asked.
 */
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
