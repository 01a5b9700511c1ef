/**
 * The one error catalogue. Every error either program reports, in TypeScript (`err.code`) and
 * in HTTP bodies (`{"error": code, "message": ...}`), comes from here. Codes are stable
 * snake_case: callers match on `code`, never on the message, and a retired code is never reused.
 * docs/reference/errors.md documents each one; test/protocol/errors-documented.test.ts keeps the
 * two in step.
 */

export interface ErrorSpec {
  readonly status: number;
  /** true when the same request may succeed later unchanged (the sidecar queues these). */
  readonly retryable: boolean;
}

export const ERRORS = {
  invalid_json: { status: 400, retryable: false },
  invalid_envelope: { status: 400, retryable: false },
  invalid_request: { status: 400, retryable: false },
  unauthorized: { status: 401, retryable: false },
  /** A JWT past its `exp`: the same request with the rotated token succeeds (the sidecar queues). */
  token_expired: { status: 401, retryable: true },
  identity_mismatch: { status: 403, retryable: false },
  sender_mismatch: { status: 403, retryable: false },
  not_member: { status: 403, retryable: false },
  /** Retired 2026-12-04: another agent's delivery is answered as an unknown one. */
  not_your_delivery: { status: 403, retryable: false },
  not_alerts_agent: { status: 403, retryable: false },
  not_operator: { status: 403, retryable: false },
  not_an_agent: { status: 403, retryable: false },
  not_your_message: { status: 403, retryable: false },
  bad_host: { status: 403, retryable: false },
  cross_origin: { status: 403, retryable: false },
  unknown_channel: { status: 404, retryable: false },
  unknown_agent: { status: 404, retryable: false },
  not_found: { status: 404, retryable: false },
  unknown_dead_letter: { status: 404, retryable: false },
  unknown_message: { status: 404, retryable: false },
  reply_to_not_found: { status: 404, retryable: false },
  method_not_allowed: { status: 405, retryable: false },
  idempotency_conflict: { status: 409, retryable: false },
  not_leased: { status: 409, retryable: false },
  /** A cancel of a scheduled message that has fired already (it has its sequence). */
  already_sent: { status: 409, retryable: false },
  payload_too_large: { status: 413, retryable: false },
  not_json: { status: 415, retryable: false },
  hop_budget_exceeded: { status: 422, retryable: false },
  thread_budget_exceeded: { status: 422, retryable: false },
  rate_limited: { status: 429, retryable: true },
  too_many_polls: { status: 429, retryable: true },
  too_many_reads: { status: 429, retryable: true },
  overloaded: { status: 503, retryable: true },
  outbox_full: { status: 503, retryable: true },
  adapter_unreachable: { status: 503, retryable: true },
  sidecar_unreachable: { status: 503, retryable: true },
  not_ready: { status: 503, retryable: true },
  shutting_down: { status: 503, retryable: true },
  storage_error: { status: 503, retryable: true },
  storage_full: { status: 503, retryable: true },
  integrity_error: { status: 500, retryable: false },
  internal: { status: 500, retryable: true },
  client_closed: { status: 499, retryable: true },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  /** The request field at fault, as a dotted path (`payload.task_id`), when there is one. */
  readonly field: string | undefined;
  /** Seconds the caller should wait before retrying, sent as Retry-After. */
  readonly retryAfterS: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    opts: { field?: string; retryAfterS?: number; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERRORS[code].status;
    this.retryable = ERRORS[code].retryable;
    this.field = opts.field;
    this.retryAfterS = opts.retryAfterS ?? (ERRORS[code].status === 503 ? 1 : undefined);
  }

  /** The HTTP body for this error; the same shape everywhere. */
  toJSON(): { error: ErrorCode; message: string; field?: string } {
    return this.field === undefined
      ? { error: this.code, message: this.message }
      : { error: this.code, message: this.message, field: this.field };
  }
}

export function isGatewayError(err: unknown): err is GatewayError {
  return err instanceof GatewayError;
}

/**
 * The one retry rule: may this answer of the adapter's succeed later unchanged? For one of our
 * codes, the catalogue says. An error answer without one of our codes did not come from the
 * adapter (a proxy or load balancer in between): 429 and 5xx are worth retrying, the rest not.
 */
export function isRetryableAnswer(status: number, code: unknown): boolean {
  if (typeof code === 'string' && Object.hasOwn(ERRORS, code)) {
    return ERRORS[code as ErrorCode].retryable;
  }
  return status === 429 || status >= 500;
}

/**
 * A refusal answered by the program behind (the adapter for the sidecar, the sidecar for
 * `agent-gateway mcp`) as the error to throw here: its code, sentence, field and Retry-After
 * kept. An answer without one of our codes did not come from our program (a proxy in between,
 * say): 429 and 5xx are `unreachable`, worth retrying, anything else `internal`.
 */
export function errorFromAnswer(
  status: number,
  body: unknown,
  retryAfterS?: number,
  unreachable: 'adapter_unreachable' | 'sidecar_unreachable' = 'adapter_unreachable',
): GatewayError {
  let b = body;
  if (typeof b === 'string') {
    try {
      b = JSON.parse(b);
    } catch {
      b = undefined;
    }
  }
  const { error, message, field } = (typeof b === 'object' && b !== null ? b : {}) as Record<
    string,
    unknown
  >;
  const ra = retryAfterS === undefined ? {} : { retryAfterS };
  if (typeof error === 'string' && Object.hasOwn(ERRORS, error) && typeof message === 'string') {
    return new GatewayError(error as ErrorCode, message, {
      ...ra,
      ...(typeof field === 'string' ? { field } : {}),
    });
  }
  const from = unreachable === 'adapter_unreachable' ? 'the adapter' : 'the sidecar';
  const text = `${from} answered ${status} without an error of its own`;
  return status === 429 || status >= 500
    ? new GatewayError(unreachable, text, { retryAfterS: retryAfterS ?? 2 })
    : new GatewayError('internal', text);
}
