/**
 * The sidecar takes only requests a local agent runtime makes (docs/reference/sidecar.md, "Who may
 * call it"). It has no token: the pod is the trust boundary. But a browser in the pod is inside
 * that boundary too, and a page it loads may send requests to localhost (a form post, a fetch with
 * a simple content type, an `<img src>` that polls the inbox) or, by DNS rebinding, read answers
 * under a name of its own. So:
 * - `Host` must name loopback (localhost, 127.0.0.1, [::1]) or the sidecar's own address, with
 *   any port: a rebound name is refused (403 `bad_host`). A loopback name counts only on a
 *   connection that is loopback at both ends: behind AGW_LISTEN=0.0.0.0 a remote caller that
 *   writes `Host: localhost` is not local. Its own address is the listen address, or, listening
 *   on a wildcard (0.0.0.0, ::), the address the connection arrived on; never the wildcard.
 * - no `Sec-Fetch-Site` of `cross-site` or `same-site`, on any method: browsers send it on every
 *   request, the no-cors GETs that carry no `Origin` too (403 `cross_origin`);
 * - no `Origin` but the sidecar's own, `http://<the Host>` with a loopback name: browsers send
 *   one on every cross-origin request and on every POST, agent runtimes none (403
 *   `cross_origin`);
 * - every POST says `Content-Type: application/json`: the content types a page may send without
 *   a preflight (form posts, text/plain) are refused (415 `not_json`).
 */
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../protocol/errors.js';
import { assertJsonContentType } from '../protocol/http.js';

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** The two ends of the connection a request came on (a socket's addresses). */
export interface ConnectionEnds {
  readonly localAddress?: string | undefined;
  readonly remoteAddress?: string | undefined;
}

/** Checks a request against the rules above; `listenHost` is AGW_LISTEN's host. */
export function checkLocalRequest(req: IncomingMessage, listenHost: string): void {
  const header = req.headers.host ?? '';
  if (!hostAllowed(header, req.socket, listenHost)) {
    throw new GatewayError(
      'bad_host',
      `Host "${header}" is not this sidecar: use localhost, 127.0.0.1 or [::1] on the same machine, or the address it listens on`,
    );
  }
  const site = req.headers['sec-fetch-site']?.toLowerCase();
  if (site !== undefined && (site.includes('cross-site') || site.includes('same-site'))) {
    throw new GatewayError(
      'cross_origin',
      `a browser's request from another site (Sec-Fetch-Site ${site}) is not taken: the sidecar serves its agent runtime`,
    );
  }
  const origin = req.headers.origin;
  if (origin !== undefined && !ownOrigin(origin, header)) {
    throw new GatewayError(
      'cross_origin',
      `a browser's request (Origin ${origin}) is not taken: the sidecar serves its agent runtime`,
    );
  }
  if (req.method === 'POST') assertJsonContentType(req);
}

/**
 * Whether a request with this Host header, on this connection, is for this sidecar (the rule
 * above). `listenHost`: AGW_LISTEN's host, an address (IPv6 without brackets) or a name.
 */
export function hostAllowed(header: string, conn: ConnectionEnds, listenHost: string): boolean {
  const host = hostName(header);
  if (LOOPBACK.has(host)) {
    return isLoopbackAddress(conn.localAddress) && isLoopbackAddress(conn.remoteAddress);
  }
  if (host === '') return false;
  const local = plainAddress(conn.localAddress);
  if (local !== undefined && host === bracketed(local)) return true;
  return !isWildcard(listenHost) && host === bracketed(listenHost.toLowerCase());
}

/** Whether AGW_LISTEN's host is loopback: a name or address no other machine reaches. */
export function isLoopbackHost(listenHost: string): boolean {
  const h = listenHost.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || isLoopbackAddress(h);
}

/** 127.0.0.0/8 or ::1, also as an IPv4-mapped IPv6 address (a dual-stack socket's). */
function isLoopbackAddress(address: string | undefined): boolean {
  const a = plainAddress(address);
  return a !== undefined && (a === '::1' || /^127\.\d+\.\d+\.\d+$/.test(a));
}

/** A socket's address in lower case, an IPv4-mapped one as plain IPv4 ("::ffff:127.0.0.1"). */
function plainAddress(address: string | undefined): string | undefined {
  if (address === undefined || address === '') return undefined;
  const a = address.toLowerCase();
  return /^::ffff:\d+\.\d+\.\d+\.\d+$/.test(a) ? a.slice(7) : a;
}

function bracketed(address: string): string {
  return address.includes(':') ? `[${address}]` : address;
}

function isWildcard(listenHost: string): boolean {
  const h = listenHost.replace(/^\[|\]$/g, '');
  return h === '0.0.0.0' || h === '::' || h === '';
}

/** The sidecar's own origin: `http://` and the Host as sent, the Host a loopback name. */
function ownOrigin(origin: string, header: string): boolean {
  const host = header.trim().toLowerCase();
  return LOOPBACK.has(hostName(host)) && origin.trim().toLowerCase() === `http://${host}`;
}

/** The host part of a Host header, lower case: "[::1]:7070" → "[::1]", "LOCALHOST:1" → "localhost". */
function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}
