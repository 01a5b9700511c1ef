/**
 * The test OTLP receiver (test/helpers/otlp-receiver.ts) decodes what the official exporters
 * send: a tracer provider exports through exporter-trace-otlp-proto (protobuf) and
 * exporter-trace-otlp-http (OTLP/JSON), plain and gzipped, and every field of the spans comes
 * back as the SDK made it: ids, parent, kind, times to the nanosecond, attributes of each type,
 * events, links, trace state, status, resource and scope. Also what it refuses, and that its
 * own protobuf reader passes over fields it does not know.
 */
import {
  type Attributes,
  type HrTime,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  decodeProtobufRequest,
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/otlp-receiver.js';

let receiver: OtlpReceiver;
beforeEach(async () => {
  receiver = await startOtlpReceiver();
});
afterEach(async () => {
  await receiver.close();
});

type ExporterConfig = NonNullable<ConstructorParameters<typeof ProtoTraceExporter>[0]>;
const GZIP = 'gzip' as ExporterConfig['compression']; // the enum CompressionAlgorithm.GZIP

const ns = (t: HrTime) => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);

/** A span of another trace, as a remote parent would hand it over, with a trace state. */
const LINKED: SpanContext = {
  traceId: '0af7651916cd43dd8448eb211c80319c',
  spanId: 'b7ad6b7169203331',
  traceFlags: 1,
  isRemote: true,
  traceState: new TraceState('vendor=abc,other=1'),
};

// times beyond 2^53 ns, with nanoseconds, so that a lossy decoder shows
const T_PARENT_START: HrTime = [1_700_000_000, 123_456_789];
const T_CHILD_START: HrTime = [1_700_000_000, 200_000_001];
const T_EVENT: HrTime = [1_700_000_000, 250_000_000];
const T_CHILD_END: HrTime = [1_700_000_000, 300_000_999];
const T_PARENT_END: HrTime = [1_700_000_001, 5];

const CHILD_ATTRIBUTES: Attributes = {
  'messaging.system': 'agw',
  'messaging.destination.name': 'pm',
  count: 3,
  negative: -42,
  ok: true,
  ratio: 0.25,
  big: 2 ** 60,
  tags: ['a', 'b'],
  nums: [1, 2.5],
  flags: [true, false],
};

const exporters = [
  { title: 'exporter-trace-otlp-proto', protocol: 'protobuf', compression: undefined },
  { title: 'exporter-trace-otlp-http (JSON)', protocol: 'json', compression: undefined },
  { title: 'exporter-trace-otlp-proto, gzipped', protocol: 'protobuf', compression: GZIP },
  { title: 'exporter-trace-otlp-http (JSON), gzipped', protocol: 'json', compression: GZIP },
] as const;

describe('the OTLP receiver decodes what the official exporters send', () => {
  for (const { title, protocol, compression } of exporters)
    it(title, { timeout: 30_000 }, async () => {
      const config: ExporterConfig = {
        url: `${receiver.url}/v1/traces`,
        ...(compression ? { compression } : {}),
      };
      const exporter =
        protocol === 'protobuf' ? new ProtoTraceExporter(config) : new JsonTraceExporter(config);
      const provider = new BasicTracerProvider({
        resource: resourceFromAttributes({ 'service.name': 'x', 'deployment.environment': 'test' }),
        spanProcessors: [new SimpleSpanProcessor(exporter)],
      });
      try {
        const tracer = provider.getTracer('agw-test', '1.2.3');
        const parent = tracer.startSpan(
          'handle request',
          { kind: SpanKind.SERVER, startTime: T_PARENT_START, attributes: { route: '/v1/send' } },
          ROOT_CONTEXT,
        );
        const child = tracer.startSpan(
          'publish',
          {
            kind: SpanKind.PRODUCER,
            startTime: T_CHILD_START,
            attributes: CHILD_ATTRIBUTES,
            links: [{ context: LINKED, attributes: { 'link.reason': 'reply-to', n: 7 } }],
          },
          trace.setSpan(ROOT_CONTEXT, parent),
        );
        child.addEvent('enqueued', { queue: 'pm', depth: 2, urgent: false, load: 0.5 }, T_EVENT);
        child.setStatus({ code: SpanStatusCode.ERROR, message: 'queue full' });
        child.end(T_CHILD_END);
        parent.setStatus({ code: SpanStatusCode.OK });
        parent.end(T_PARENT_END);
        // a consumer under the remote span: its parent is remote, its trace state inherited
        const consumer = tracer.startSpan(
          'deliver',
          { kind: SpanKind.CONSUMER },
          trace.setSpanContext(ROOT_CONTEXT, LINKED),
        );
        consumer.end();
        await provider.forceFlush();

        const spans = await receiver.waitFor((s) => s.length >= 3, 10_000);
        // one export per span ended (SimpleSpanProcessor), concurrent: they may arrive in any order
        expect(spans.map((s) => s.name).sort()).toEqual(['deliver', 'handle request', 'publish']);
        const named = (name: string) => spans.find((s) => s.name === name)!;
        const [gotChild, gotParent, gotConsumer] = [
          named('publish'),
          named('handle request'),
          named('deliver'),
        ];

        const pc = parent.spanContext();
        const cc = child.spanContext();
        expect(gotParent).toEqual({
          traceId: pc.traceId,
          spanId: pc.spanId,
          name: 'handle request',
          kind: 2,
          startNs: 1_700_000_000_123_456_789n,
          endNs: 1_700_000_001_000_000_005n,
          attributes: { route: '/v1/send' },
          events: [],
          links: [],
          status: { code: 1 },
          service: 'x',
          resource: expect.objectContaining({
            'service.name': 'x',
            'deployment.environment': 'test',
          }),
          scope: 'agw-test',
          protocol,
        } satisfies ReceivedSpan);
        expect(gotParent.parentSpanId).toBeUndefined();
        expect(gotParent.traceState).toBeUndefined();

        expect(gotChild).toEqual({
          traceId: pc.traceId,
          spanId: cc.spanId,
          parentSpanId: pc.spanId,
          name: 'publish',
          kind: 4,
          startNs: ns(T_CHILD_START),
          endNs: ns(T_CHILD_END),
          attributes: {
            'messaging.system': 'agw',
            'messaging.destination.name': 'pm',
            count: 3,
            negative: -42,
            ok: true,
            ratio: 0.25,
            big: 2n ** 60n, // an int64 beyond 2^53 stays a bigint
            tags: ['a', 'b'],
            nums: [1, 2.5],
            flags: [true, false],
          },
          events: [
            {
              name: 'enqueued',
              timeNs: 1_700_000_000_250_000_000n,
              attributes: { queue: 'pm', depth: 2, urgent: false, load: 0.5 },
            },
          ],
          links: [
            {
              traceId: LINKED.traceId,
              spanId: LINKED.spanId,
              traceState: 'vendor=abc,other=1',
              attributes: { 'link.reason': 'reply-to', n: 7 },
            },
          ],
          status: { code: 2, message: 'queue full' },
          service: 'x',
          resource: gotParent.resource,
          scope: 'agw-test',
          protocol,
        } satisfies ReceivedSpan);
        expect(cc.traceId).toBe(pc.traceId);
        expect(gotChild.traceId).toMatch(/^[0-9a-f]{32}$/);
        expect(gotChild.spanId).toMatch(/^[0-9a-f]{16}$/);

        const sdkConsumer = consumer as unknown as ReadableSpan;
        expect(gotConsumer).toMatchObject({
          traceId: LINKED.traceId,
          spanId: consumer.spanContext().spanId,
          parentSpanId: LINKED.spanId,
          traceState: 'vendor=abc,other=1',
          kind: 5,
          startNs: ns(sdkConsumer.startTime),
          endNs: ns(sdkConsumer.endTime),
          status: { code: 0 },
          links: [],
        });
        expect(gotConsumer.status.message).toBeUndefined();
        expect(gotConsumer.endNs).toBeGreaterThanOrEqual(gotConsumer.startNs);
        expect(receiver.spans).toHaveLength(3);
      } finally {
        await provider.shutdown();
      }
    });
});

describe('the OTLP receiver over HTTP', () => {
  const post = (path: string, headers: Record<string, string>, body: string | Uint8Array) =>
    fetch(receiver.url + path, { method: 'POST', headers, body });

  it('answers an empty ExportTraceServiceResponse in the encoding it was sent', async () => {
    const proto = await post('/v1/traces', { 'content-type': 'application/x-protobuf' }, '');
    expect(proto.status).toBe(200);
    expect(proto.headers.get('content-type')).toBe('application/x-protobuf');
    expect((await proto.arrayBuffer()).byteLength).toBe(0);
    const json = await post(
      '/v1/traces',
      { 'content-type': 'application/json; charset=utf-8' },
      '{"resourceSpans":[]}',
    );
    expect(json.status).toBe(200);
    expect(json.headers.get('content-type')).toBe('application/json');
    expect(await json.text()).toBe('{}');
    expect(receiver.spans).toEqual([]);
  });

  it('refuses another path or method (404), content type or encoding (415), a bad body (400)', async () => {
    expect((await fetch(`${receiver.url}/v1/traces`)).status).toBe(404);
    expect((await post('/v1/metrics', { 'content-type': 'application/json' }, '{}')).status).toBe(
      404,
    );
    expect((await post('/v1/traces', { 'content-type': 'text/plain' }, 'x')).status).toBe(415);
    expect(
      (
        await post(
          '/v1/traces',
          { 'content-type': 'application/json', 'content-encoding': 'br' },
          '{}',
        )
      ).status,
    ).toBe(415);
    expect((await post('/v1/traces', { 'content-type': 'application/json' }, '{')).status).toBe(
      400,
    );
    const truncated = Uint8Array.of(0x0a, 0x05, 0x12); // resource_spans, 5 bytes announced, 1 sent
    expect(
      (await post('/v1/traces', { 'content-type': 'application/x-protobuf' }, truncated)).status,
    ).toBe(400);
  });

  it('waitFor resolves on the arrival that satisfies it, and rejects naming what came', async () => {
    const waiting = receiver.waitFor((s) => s.some((x) => x.name === 'late'));
    const body = JSON.stringify({
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'svc' } }] },
          scopeSpans: [
            {
              scope: { name: 's' },
              spans: [
                {
                  traceId: '5B8EFFF798038103D269B633813FC60C',
                  spanId: 'EEE19B7EC3C1B174',
                  parentSpanId: '',
                  name: 'late',
                  kind: 'SPAN_KIND_CLIENT',
                  startTimeUnixNano: 1_000,
                  endTimeUnixNano: '2000',
                  attributes: [{ key: 'n', value: { intValue: '-5' } }],
                  status: { code: 'STATUS_CODE_OK' },
                },
              ],
            },
          ],
        },
      ],
    });
    expect((await post('/v1/traces', { 'content-type': 'application/json' }, body)).status).toBe(
      200,
    );
    const [late] = await waiting;
    expect(late).toMatchObject({
      traceId: '5b8efff798038103d269b633813fc60c',
      spanId: 'eee19b7ec3c1b174',
      kind: 3,
      startNs: 1000n,
      endNs: 2000n,
      attributes: { n: -5 },
      status: { code: 1 },
      service: 'svc',
      protocol: 'json',
    });
    expect(late!.parentSpanId).toBeUndefined();
    await expect(receiver.waitFor((s) => s.length > 1, 50)).rejects.toThrow(
      /within 50 ms; 1 span\(s\) received: svc:late/,
    );
  });
});

describe("the receiver's protobuf reader", () => {
  it('passes over fields it does not know, of every wire type, and reads over-long varints', () => {
    const varint = (n: number): number[] =>
      n < 0x80 ? [n] : [(n & 0x7f) | 0x80, ...varint(Math.floor(n / 0x80))];
    const len = (field: number, bytes: number[]) => [
      ...varint((field << 3) | 2),
      ...varint(bytes.length),
      ...bytes,
    ];
    const span = [
      ...len(1, Array(16).fill(0xab)), // trace_id
      ...len(2, Array(8).fill(0xcd)), // span_id
      ...varint(99 << 3), // unknown varint, a two-byte tag
      ...[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // -1 as int64
      ...varint((20 << 3) | 1),
      ...[1, 2, 3, 4, 5, 6, 7, 8], // unknown fixed64
      ...varint((21 << 3) | 5),
      ...[1, 2, 3, 4], // unknown fixed32
      ...len(22, [1, 2, 3]), // unknown bytes
      ...[(5 << 3) | 2, 0x85, 0x00, ...Buffer.from('hello')], // name, length 5 padded to 2 bytes
      ...[6 << 3, 0x82, 0x80, 0x00], // kind 2, padded to 3 bytes
      ...[(7 << 3) | 1, 1, 0, 0, 0, 0, 0, 0, 0x80], // start_time_unix_nano 2^63 + 1
      ...len(9, [
        ...len(1, [...Buffer.from('n')]),
        ...len(2, [3 << 3, 0xfe, ...Array(8).fill(0xff), 0x01]),
      ]), // n = -2
    ];
    const request = len(1, len(2, len(2, span)));
    const [s] = decodeProtobufRequest(Uint8Array.from(request));
    expect(s).toMatchObject({
      traceId: 'ab'.repeat(16),
      spanId: 'cd'.repeat(8),
      name: 'hello',
      kind: 2,
      startNs: 2n ** 63n + 1n,
      endNs: 0n,
      attributes: { n: -2 },
      service: '',
      scope: '',
      protocol: 'protobuf',
    });
    expect(() => decodeProtobufRequest(Uint8Array.of(0x0b))).toThrow(/wire type 3/);
  });
});
