/**
 * W3C trace context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
 * a message carries from its creation (CONTRACT.md, "Trace context"). Pure and zod-free, so the
 * client may use it too. Reading them costs a regular expression; no telemetry code is here.
 */

/** A message's creation context as it is stored and handed out with it. */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate?: string;
}

/** version-traceid-parentid-flags, lowercase hex; a later version may add fields after a '-'. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** tracestate: at most 512 characters (the W3C's limit a vendor may cut at), printable ASCII. */
export const TRACESTATE_MAX = 512;
const TRACESTATE = /^[\x20-\x7e]*$/;

export const TRACEPARENT_RULE =
  'must be a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lowercase, ids not all zero';
export const TRACESTATE_RULE = `must be a W3C tracestate: at most ${TRACESTATE_MAX} printable ASCII characters`;

/** The parts of a valid traceparent; undefined for anything the W3C says to ignore. */
export function parseTraceparent(
  value: string,
): { traceId: string; spanId: string; flags: number } | undefined {
  if (value.length < 55 || value.length > 256) return undefined;
  const m = TRACEPARENT.exec(value);
  if (m === null) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff') return undefined; // forbidden
  if (version === '00' && rest !== undefined) return undefined; // version 00 has exactly 4 parts
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId: traceId!, spanId: spanId!, flags: Number.parseInt(flags!, 16) };
}

export function isTraceparent(value: string): boolean {
  return parseTraceparent(value) !== undefined;
}

export function isTracestate(value: string): boolean {
  return value.length <= TRACESTATE_MAX && TRACESTATE.test(value);
}

/**
 * The context of a request's `traceparent`/`tracestate` headers, or undefined: a malformed
 * header is ignored, as the W3C says (a malformed envelope field is a 400 instead), and so is a
 * tracestate that is, or that comes without a valid traceparent.
 */
export function traceFromHeaders(headers: {
  readonly [name: string]: string | string[] | undefined;
}): TraceContext | undefined {
  const parent = headers.traceparent;
  if (typeof parent !== 'string' || !isTraceparent(parent)) return undefined;
  const state = headers.tracestate;
  const joined = Array.isArray(state) ? state.join(',') : state;
  return joined !== undefined && joined !== '' && isTracestate(joined)
    ? { traceparent: parent, tracestate: joined }
    : { traceparent: parent };
}

/**
 * The trace context at the head of a stored message's JSON (the assigned fields come before
 * `"payload":`), without parsing its payload; undefined when it has none.
 */
export function traceOfMessage(messageJson: string): TraceContext | undefined {
  const end = messageJson.indexOf('"payload":');
  const head = end < 0 ? messageJson : messageJson.slice(0, end);
  const p = /"traceparent":"([^"]+)"/.exec(head);
  if (p === null) return undefined;
  const s = /"tracestate":"((?:[^"\\]|\\.)*)"/.exec(head);
  return s === null
    ? { traceparent: p[1]! }
    : { traceparent: p[1]!, tracestate: JSON.parse(`"${s[1]}"`) as string };
}
