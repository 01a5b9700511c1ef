/**
 * The OpenTelemetry SDK behind tracing.ts's interface: loaded only when the OTEL_* variables ask
 * for traces (tracing.ts openTracing), and the only module that imports @opentelemetry/*.
 *
 * A BasicTracerProvider with a BatchSpanProcessor (OTEL_BSP_* tunes it) and the OTLP/HTTP
 * exporter for OTEL_EXPORTER_OTLP_PROTOCOL (protobuf or JSON; each reads its endpoint, headers,
 * timeout and compression from the standard variables itself). The sampler is the SDK's, from
 * OTEL_TRACES_SAMPLER (parent-based, always on, by default). The resource: OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES over the program's default name. No global provider and no context
 * manager are registered: spans are parented explicitly, from the contexts messages carry.
 */
import {
  type Context,
  DiagLogLevel,
  diag,
  type Link,
  type Attributes as OtelAttributes,
  SpanKind as OtelKind,
  type Span as OtelSpan,
  ROOT_CONTEXT,
  SpanStatusCode,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  defaultResource,
  detectResources,
  envDetector,
  resourceFromAttributes,
} from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { TraceContext } from '../protocol/trace-context.js';
import { VERSION } from '../protocol/version.js';
import {
  type Attributes,
  otlpProtocol,
  type Program,
  type Span,
  type SpanKind,
  type SpanLink,
  type SpanOptions,
  type Tracing,
} from './tracing.js';

const KINDS: Record<SpanKind, OtelKind> = {
  producer: OtelKind.PRODUCER,
  consumer: OtelKind.CONSUMER,
  client: OtelKind.CLIENT,
  internal: OtelKind.INTERNAL,
};

type Carrier = { traceparent?: string; tracestate?: string };
const getter: TextMapGetter<Carrier> = {
  keys: (c) => Object.keys(c),
  get: (c, k) => (k === 'traceparent' || k === 'tracestate' ? c[k] : undefined),
};
const setter: TextMapSetter<Carrier> = {
  set: (c, k, v) => {
    if (k === 'traceparent' || k === 'tracestate') c[k] = v;
  },
};
const propagator = new W3CTraceContextPropagator();

function contextOf(tc: TraceContext | undefined): Context {
  return tc === undefined ? ROOT_CONTEXT : propagator.extract(ROOT_CONTEXT, { ...tc }, getter);
}

function clean(a: Attributes | undefined): OtelAttributes | undefined {
  if (a === undefined) return undefined;
  const out: OtelAttributes = {};
  for (const [k, v] of Object.entries(a)) if (v !== undefined) out[k] = v;
  return out;
}

function otelLink(l: SpanLink): Link | undefined {
  const sc = trace.getSpanContext(contextOf(l.context));
  if (sc === undefined) return undefined;
  const attributes = clean(l.attributes);
  return attributes === undefined ? { context: sc } : { context: sc, attributes };
}

class SdkSpan implements Span {
  readonly #span: OtelSpan;
  #context: TraceContext | undefined;

  constructor(span: OtelSpan) {
    this.#span = span;
  }

  get context(): TraceContext | undefined {
    if (this.#context === undefined) {
      const c: Carrier = {};
      propagator.inject(trace.setSpan(ROOT_CONTEXT, this.#span), c, setter);
      if (c.traceparent !== undefined) {
        this.#context =
          c.tracestate === undefined
            ? { traceparent: c.traceparent }
            : { traceparent: c.traceparent, tracestate: c.tracestate };
      }
    }
    return this.#context;
  }

  set(attributes: Attributes): void {
    this.#span.setAttributes(clean(attributes)!);
  }

  rename(name: string): void {
    this.#span.updateName(name);
  }

  event(name: string, attributes?: Attributes): void {
    this.#span.addEvent(name, clean(attributes));
  }

  link(link: SpanLink): void {
    const l = otelLink(link);
    if (l !== undefined) this.#span.addLink(l);
  }

  fail(err: unknown): void {
    const code = (err as { code?: unknown })?.code;
    const message = err instanceof Error ? err.message : String(err);
    this.#span.setAttribute('error.type', typeof code === 'string' ? code : 'error');
    this.#span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  end(at?: number): void {
    this.#span.end(at);
  }
}

class SdkTracing implements Tracing {
  readonly on = true;
  readonly #provider: BasicTracerProvider;
  readonly #tracer: Tracer;

  constructor(provider: BasicTracerProvider) {
    this.#provider = provider;
    this.#tracer = provider.getTracer('agent-gateway', VERSION);
  }

  start(name: string, kind: SpanKind, opts: SpanOptions = {}): Span {
    const links = opts.links?.flatMap((l) => otelLink(l) ?? []);
    const span = this.#tracer.startSpan(
      name,
      {
        kind: KINDS[kind],
        ...(opts.attributes === undefined ? {} : { attributes: clean(opts.attributes) }),
        ...(links === undefined ? {} : { links }),
        ...(opts.startTime === undefined ? {} : { startTime: opts.startTime }),
      },
      contextOf(opts.parent),
    );
    return new SdkSpan(span);
  }

  async shutdown(): Promise<void> {
    await this.#provider.shutdown();
  }
}

/** How often a failing export is told, ms: a collector that is away fails every batch. */
const WARN_EVERY_MS = 60_000;

export async function openOtel(
  program: Program,
  env: NodeJS.ProcessEnv,
  warn: (message: string) => void,
): Promise<Tracing> {
  // the SDK tells what goes wrong (an export that failed) through diag: one line a minute
  let told = Number.NEGATIVE_INFINITY;
  const tell = (message: unknown, ...args: unknown[]) => {
    const now = Date.now();
    if (now - told < WARN_EVERY_MS) return;
    told = now;
    const detail = args.map((a) => (a instanceof Error ? a.message : String(a))).join(' ');
    warn(
      `tracing: ${String(message)}${detail === '' ? '' : ` ${detail}`} (spans are dropped; told at most once a minute)`,
    );
  };
  const quiet = () => {};
  diag.setLogger(
    { error: tell, warn: tell, info: quiet, debug: quiet, verbose: quiet },
    DiagLogLevel.WARN,
  );
  const exporter =
    otlpProtocol(env) === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  const resource = defaultResource()
    .merge(
      resourceFromAttributes({
        'service.name': `agent-gateway-${program}`,
        'service.version': VERSION,
      }),
    )
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  return new SdkTracing(provider);
}
