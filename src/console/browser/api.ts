/**
 * The console's one door to the adapter: the JSON API at the page's own origin, with the
 * operator's token from this tab's sessionStorage as a bearer token. No cookies: a token typed
 * into the sign-in form lives as long as the tab does and goes nowhere else.
 */

const TOKEN_KEY = 'agw-token';

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string): void {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer other than 2xx: the adapter's `{ "error": code, "message": text }`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

// biome-ignore lint/suspicious/noExplicitAny: answers are read field by field by the views
export type Json = any;

export interface CallOptions {
  /** JSON body (POST). */
  readonly body?: unknown;
  /** Ends the request when the view that made it is left. */
  readonly signal?: AbortSignal;
  /** Instead of the stored token (the sign-in form checks one before it keeps it). */
  readonly token?: string;
}

/** `method path` at the adapter; the parsed JSON answer, or throws ApiError. */
export async function api(method: string, path: string, opts: CallOptions = {}): Promise<Json> {
  const headers: Record<string, string> = { accept: 'application/json' };
  const bearer = opts.token ?? token();
  if (bearer !== null) headers.authorization = `Bearer ${bearer}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const init: RequestInit = { method, headers, credentials: 'omit', cache: 'no-store' };
  if (opts.body !== undefined) init.body = JSON.stringify(opts.body);
  if (opts.signal !== undefined) init.signal = opts.signal;
  const res = await fetch(path, init);
  const text = await res.text();
  let body: Json = null;
  try {
    body = text === '' ? null : JSON.parse(text);
  } catch {
    body = null;
  }
  if (!res.ok) {
    const code = typeof body?.error === 'string' ? body.error : `http_${res.status}`;
    const message = typeof body?.message === 'string' ? body.message : text.slice(0, 200);
    throw new ApiError(res.status, code, message || res.statusText);
  }
  return body;
}

/** A query string of the fields that have a value (`?q=x&limit=50`, or ''). */
export function query(fields: Record<string, string | number | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}
