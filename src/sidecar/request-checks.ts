/**
 * The sidecar takes only requests a local agent runtime makes (CONTRACT.md, "Sidecar HTTP API").
 * It has no token: the pod is the trust boundary. But a browser in the pod is inside that
 * boundary too, and a page it loads may send requests to localhost (a form post, a fetch with a
 * simple content type) or, by DNS rebinding, read answers under a name of its own. So:
 * - `Host` must name loopback (localhost, 127.0.0.1, [::1]) or the sidecar's own listen address,
 *   with any port: a rebound name is refused (403 `bad_host`);
 * - no `Origin` header: browsers send one on every cross-origin request and on every POST, agent
 *   runtimes do not (403 `cross_origin`);
 * - every POST says `Content-Type: application/json`: the content types a page may send without
 *   a preflight (form posts, text/plain) are refused (415 `not_json`).
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../protocol/errors.js';
import { assertJsonContentType } from '../protocol/http.js';

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Checks a request against the rules above; `listenHost` is the sidecar's own host. */
export function checkLocalRequest(req: IncomingMessage, listenHost: string): void {
  const host = hostName(req.headers.host ?? '');
  const own = listenHost.includes(':') ? `[${listenHost.toLowerCase()}]` : listenHost.toLowerCase();
  if (!LOOPBACK.has(host) && host !== own) {
    throw new GatewayError(
      'bad_host',
      `Host "${req.headers.host ?? ''}" is not this sidecar: use localhost, 127.0.0.1 or [::1]`,
    );
  }
  if (req.headers.origin !== undefined) {
    throw new GatewayError(
      'cross_origin',
      `a browser's request (Origin ${req.headers.origin}) is not taken: the sidecar serves its agent runtime`,
    );
  }
  if (req.method === 'POST') assertJsonContentType(req);
}

/** The host part of a Host header, lower case: "[::1]:7070" → "[::1]", "LOCALHOST:1" → "localhost". */
function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}
