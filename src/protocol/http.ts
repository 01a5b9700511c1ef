/**
 * The HTTP plumbing both programs share: bounded body reads and JSON answers whose error bodies
 * come from the one catalogue (errors.ts).
 */
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError } from './errors.js';

/**
 * Reads a request body of at most `limit` bytes. A larger body is refused with 413 as soon as
 * Content-Length or the bytes read so far show it, without buffering the rest.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
    req.once('error', reject);
  });
}

function tooLarge(limit: number): GatewayError {
  return new GatewayError('payload_too_large', `the request body is larger than ${limit} bytes`);
}

/**
 * 415 `not_json` unless the request says `Content-Type: application/json`; parameters
 * (`; charset=utf-8`) are fine, since JSON text is UTF-8 whatever they say (parseJson checks it).
 * The content types a browser page may send without a preflight (text/plain, form posts) are
 * refused with the rest.
 */
export function assertJsonContentType(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') {
    throw new GatewayError(
      'not_json',
      `a POST must say Content-Type: application/json${type === '' ? '' : `, not ${type}`}`,
    );
  }
}

/** Whether a request carries a body: a Content-Length above 0, or chunks (Transfer-Encoding). */
export function carriesBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Parses a JSON body; a syntax error is a 400 that says where. JSON text is UTF-8: bytes that
 * are not would be decoded to U+FFFD, changing the sender's text without a word, so they are a
 * 400 too.
 */
export function parseJson(body: Buffer): unknown {
  if (!isUtf8(body)) throw new GatewayError('invalid_json', 'the body is not valid UTF-8');
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new GatewayError('invalid_json', `the body is not valid JSON: ${(err as Error).message}`);
  }
}

export function sendJson(res: ServerResponse, status: number, body: string | object): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

export function sendError(res: ServerResponse, err: GatewayError): void {
  if (err.retryAfterS !== undefined) res.setHeader('retry-after', String(err.retryAfterS));
  if (err.status === 401) res.setHeader('www-authenticate', 'Bearer');
  // A 413 leaves the rest of the body unread: close rather than read it to reuse the socket.
  if (err.status === 413) res.setHeader('connection', 'close');
  sendJson(res, err.status, err.toJSON());
}

/**
 * An integer query parameter within bounds, written in plain decimal digits; a bad one is a 400
 * naming it. Number() alone took `0x10` (16), `1e1` and `5 `: looser
 * than "an integer", and a hex `wait` read as 16 s is not what a reader of the URL sees. At most
 * 16 digits: every bound here is below 2^53 (9,007,199,254,740,991, 16 digits), so a longer one is
 * out of range anyway and is never parsed inexactly.
 */
export function intParam(
  query: URLSearchParams,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = query.get(name);
  if (raw === null) return fallback;
  const n = /^[0-9]{1,16}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new GatewayError('invalid_request', `${name}: must be an integer from ${min} to ${max}`, {
      field: name,
    });
  }
  return n;
}
