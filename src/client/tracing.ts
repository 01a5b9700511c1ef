/**
 * The client's part of a trace (CONTRACT.md, "Trace context"): a handler runs in a `process
 * <channel>` span, a child of the delivered message's context, so an agent's work continues the
 * sender's trace; and a send made with no `traceparent` of its own carries the active span's.
 *
 * Through @opentelemetry/api, when the application has it (it is the one OpenTelemetry package a
 * library should use; an optional peer of this package, which depends on nothing). Without it, or
 * with no tracer provider registered, nothing is recorded and nothing changes. The API is reached
 * through the small shape below, so the client's types name no package.
 */
import { parseTraceparent, type TraceContext } from '../protocol/trace-context.js';

interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
  traceState?: { serialize(): string };
}
interface SpanLike {
  setAttribute(key: string, value: string | number | boolean): unknown;
  recordException(err: Error | string): void;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}
type ContextLike = object;
/** What the client uses of @opentelemetry/api 1.x. */
interface OtelApiLike {
  trace: {
    getTracer(name: string): {
      startActiveSpan<R>(
        name: string,
        options: { kind: number; attributes: Record<string, string | number | boolean> },
        context: ContextLike,
        fn: (span: SpanLike) => R,
      ): R;
    };
    setSpanContext(context: ContextLike, spanContext: SpanContextLike): ContextLike;
    getSpanContext(context: ContextLike): SpanContextLike | undefined;
  };
  context: { active(): ContextLike };
  ROOT_CONTEXT: ContextLike;
  createTraceState(raw?: string): { serialize(): string };
}

/** SpanKind.CONSUMER and SpanStatusCode.ERROR of the API. */
const CONSUMER = 4;
const ERROR = 2;

let loading: Promise<OtelApiLike | undefined> | undefined;

/** The application's @opentelemetry/api, or undefined when it has none. Loaded once. */
export function otelApi(): Promise<OtelApiLike | undefined> {
  loading ??= import('@opentelemetry/api').then(
    (m) => m as unknown as OtelApiLike,
    () => undefined,
  );
  return loading;
}

/**
 * Runs `fn` in a `process <channel>` span whose parent is the message's creation context (a new
 * trace when it has none), active while it runs; ended with its outcome.
 */
export async function inHandlingSpan<R>(
  api: OtelApiLike | undefined,
  message: {
    readonly channel: string;
    readonly message_id: string;
    readonly traceparent?: string;
    readonly tracestate?: string;
  },
  attempt: number,
  fn: () => Promise<R>,
): Promise<R> {
  if (api === undefined) return fn();
  const parent = parentContext(api, message);
  const tracer = api.trace.getTracer('agent-gateway-client');
  return tracer.startActiveSpan(
    `process ${message.channel}`,
    {
      kind: CONSUMER,
      attributes: {
        'messaging.system': 'agent-gateway',
        'messaging.operation.type': 'process',
        'messaging.destination.name': message.channel,
        'messaging.message.id': message.message_id,
        'agw.attempt': attempt,
      },
    },
    parent,
    async (span) => {
      try {
        return await fn();
      } catch (err) {
        span.recordException(err instanceof Error ? err : String(err));
        span.setStatus({ code: ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

function parentContext(
  api: OtelApiLike,
  m: { readonly traceparent?: string; readonly tracestate?: string },
): ContextLike {
  const p = m.traceparent === undefined ? undefined : parseTraceparent(m.traceparent);
  if (p === undefined) return api.context.active();
  return api.trace.setSpanContext(api.context.active(), {
    traceId: p.traceId,
    spanId: p.spanId,
    traceFlags: p.flags,
    isRemote: true,
    ...(m.tracestate === undefined ? {} : { traceState: api.createTraceState(m.tracestate) }),
  });
}

/** The active span's context as W3C trace context, or undefined when none is active. */
export function activeTrace(api: OtelApiLike | undefined): TraceContext | undefined {
  const sc = api?.trace.getSpanContext(api.context.active());
  if (sc === undefined || /^0+$/.test(sc.traceId) || /^0+$/.test(sc.spanId)) return undefined;
  const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
  const state = sc.traceState?.serialize();
  return state ? { traceparent, tracestate: state } : { traceparent };
}
