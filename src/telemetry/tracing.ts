/**
 * Tracing: the one seam between the programs and OpenTelemetry (CONTRACT.md, "Trace context";
 * docs/design/tracing.md). The programs speak to this small interface only; when no OTEL_*
 * variable asks for traces it is NO_TRACING, and no OpenTelemetry module is ever loaded (otel.ts
 * is imported on demand, and only it imports @opentelemetry/*). Callers test `tracing.on` before
 * they build a span's attributes, so tracing off costs a property read.
 */
import type { TraceContext } from '../protocol/trace-context.js';
import { SettingsError } from '../settings.js';

export type Attributes = Readonly<Record<string, string | number | boolean | undefined>>;

/** OpenTelemetry's span kinds, as the messaging conventions use them. */
export type SpanKind = 'producer' | 'consumer' | 'client' | 'internal';

export interface SpanLink {
  readonly context: TraceContext;
  readonly attributes?: Attributes;
}

export interface SpanOptions {
  /** The parent's context (a message's, a request's `traceparent`); none: a new trace. */
  readonly parent?: TraceContext | undefined;
  readonly links?: readonly SpanLink[];
  readonly attributes?: Attributes;
  /** When it began, ms since the epoch (a span recorded after the fact); default now. */
  readonly startTime?: number;
}

export interface Span {
  /** Its own context, to hand on (a stored message's, a request's header). */
  readonly context: TraceContext | undefined;
  set(attributes: Attributes): void;
  rename(name: string): void;
  event(name: string, attributes?: Attributes): void;
  link(link: SpanLink): void;
  /** Marks it failed, with the error's code or message. */
  fail(err: unknown): void;
  /** Ends it (exported); `at` ms since the epoch, default now. A span never ended is dropped. */
  end(at?: number): void;
}

export interface Tracing {
  readonly on: boolean;
  start(name: string, kind: SpanKind, opts?: SpanOptions): Span;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

const NO_SPAN: Span = {
  context: undefined,
  set() {},
  rename() {},
  event() {},
  link() {},
  fail() {},
  end() {},
};

/** Tracing off: nothing recorded, nothing loaded. */
export const NO_TRACING: Tracing = {
  on: false,
  start: () => NO_SPAN,
  shutdown: async () => {},
};

export type Program = 'adapter' | 'sidecar';

/** The protocols the OTLP/HTTP exporters speak (gRPC is not shipped: one fewer native stack). */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;

/**
 * Whether the OTEL_* variables ask for traces: OTEL_TRACES_EXPORTER `otlp`, or an OTLP endpoint
 * set; `none` (or OTEL_SDK_DISABLED=true) wins. Any other exporter name, or a protocol we do not
 * speak, is a bad setting: one line at start.
 */
export function tracesRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e !== '');
  if (exporters.includes('none')) return false;
  const unknown = exporters.find((e) => e !== 'otlp');
  if (unknown !== undefined) {
    throw new SettingsError(
      `OTEL_TRACES_EXPORTER: "${unknown}" is not an exporter agent-gateway ships; use otlp or none`,
    );
  }
  const asked =
    exporters.includes('otlp') ||
    nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT) ||
    nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  if (!asked) return false;
  const protocol = otlpProtocol(env);
  if (!(OTLP_PROTOCOLS as readonly string[]).includes(protocol)) {
    const name = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
      ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_PROTOCOL';
    throw new SettingsError(
      `${name}: "${protocol}" is not spoken here; use http/protobuf (the default) or http/json`,
    );
  }
  return true;
}

export function otlpProtocol(env: NodeJS.ProcessEnv): string {
  return (
    [env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, env.OTEL_EXPORTER_OTLP_PROTOCOL]
      .find(nonEmpty)
      ?.trim() ?? 'http/protobuf'
  );
}

function nonEmpty(v: string | undefined): v is string {
  return v !== undefined && v.trim() !== '';
}

/**
 * The program's tracing: NO_TRACING unless the OTEL_* variables ask for traces, else the
 * OpenTelemetry SDK (otel.ts, loaded now and only now). Throws SettingsError for a bad setting.
 * `env` decides; the SDK's parts read the same variables from process.env (the programs pass
 * process.env). `warn`: told when spans cannot be exported (a collector away), at most once a
 * minute; tracing never stops or slows the program for it, the spans are dropped.
 */
export async function openTracing(
  program: Program,
  env: NodeJS.ProcessEnv,
  warn: (message: string) => void = () => {},
): Promise<Tracing> {
  if (!tracesRequested(env)) return NO_TRACING;
  const { openOtel } = await import('./otel.js');
  return openOtel(program, env, warn);
}

/** The messaging conventions' attributes every span of ours carries. */
export const MESSAGING_SYSTEM = 'agent-gateway';
