/**
 * The client continues the sender's trace (CONTRACT.md, "Trace context"): with the application's
 * OpenTelemetry (a real SDK: NodeTracerProvider with its AsyncLocalStorage context, spans kept in
 * memory), a send from within a span carries it as the message's creation context; the receive
 * loop runs each handler in a `process <channel>` span, a child of the delivered message's
 * context, active while it runs, so the handler's reply is in the same trace; a handler that
 * throws ends its span as an error. Against a real adapter on loopback.
 */
import { context, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Delivery, GatewayClient, type Message } from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { tokenOf } from '../helpers/topology.js';

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
let t: TestAdapter;

beforeAll(async () => {
  provider.register();
  t = await startTestAdapter();
});
afterAll(async () => {
  await t?.stop();
  await provider.shutdown();
  trace.disable();
  context.disable();
});

it("a handler's span is a child of the delivered message's context, and its reply continues the trace", async () => {
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const tracer = trace.getTracer('orchestrator');
  const turn = tracer.startSpan('pm turn');
  const sent = await context.with(trace.setSpan(context.active(), turn), () =>
    pm.send({ to: '@qa', kind: 'task/request', payload: { task_id: 'T-1', description: 'd' } }),
  );
  turn.end();
  if (sent.status !== 'delivered') throw new Error('not delivered');

  const controller = new AbortController();
  let handled: { message: Message; traceId?: string; spanId?: string } | undefined;
  await qa.receive(
    async (message) => {
      const active = trace.getSpan(context.active())?.spanContext();
      handled = { message, traceId: active?.traceId, spanId: active?.spanId };
      await qa.send({
        to: '@pm',
        kind: 'task/result',
        payload: { task_id: 'T-1', status: 'success' },
        reply_to: message.message_id,
      });
      controller.abort();
    },
    { signal: controller.signal, waitS: 1 },
  );
  const turnContext = turn.spanContext();
  // the message's stored context is pm's span
  expect(handled!.message.traceparent).toBe(`00-${turnContext.traceId}-${turnContext.spanId}-01`);
  const process = exporter.getFinishedSpans().find((s) => s.name === 'process @qa');
  expect(process).toBeDefined();
  expect(process!.spanContext().traceId).toBe(turnContext.traceId);
  expect(process!.parentSpanContext?.spanId).toBe(turnContext.spanId);
  expect(process!.attributes).toMatchObject({
    'messaging.message.id': sent.message_id,
    'messaging.destination.name': '@qa',
    'agw.attempt': 1,
  });
  expect(handled!.spanId).toBe(process!.spanContext().spanId);
  // the reply carries the handling span's context: pm sees it in the same trace
  const [reply] = (await pollAll(pm)).map((d) => d.message);
  expect(reply!.traceparent).toBe(`00-${turnContext.traceId}-${process!.spanContext().spanId}-01`);
});

it('a handler that throws ends its span as an error, and a message without context starts a trace', async () => {
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const sent = await pm.send({ to: '@qa', kind: 'status', payload: { n: 1 } });
  if (sent.status !== 'delivered') throw new Error('not delivered');
  const controller = new AbortController();
  let calls = 0;
  await qa.receive(
    async () => {
      calls++;
      controller.abort();
      throw new Error('not today');
    },
    { signal: controller.signal, waitS: 1, onError: () => {} },
  );
  expect(calls).toBe(1);
  const process = exporter
    .getFinishedSpans()
    .find(
      (s) => s.name === 'process @qa' && s.attributes['messaging.message.id'] === sent.message_id,
    );
  expect(process?.status).toMatchObject({ code: 2, message: 'not today' });
  expect(process?.parentSpanContext).toBeUndefined();
});

it('with trace: false, no span is made', async () => {
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const sent = await pm.send({ to: '@qa', kind: 'status', payload: { n: 2 } });
  if (sent.status !== 'delivered') throw new Error('not delivered');
  const before = exporter.getFinishedSpans().length;
  const controller = new AbortController();
  await qa.receive(
    async () => {
      controller.abort();
    },
    { signal: controller.signal, waitS: 1, trace: false },
  );
  expect(exporter.getFinishedSpans().length).toBe(before);
});

/** What pm's inbox holds now, acked. */
async function pollAll(gw: GatewayClient): Promise<Delivery[]> {
  const { deliveries } = await gw.call('inbox', { wait: 1, max: 10 });
  if (deliveries.length > 0) await gw.ack(deliveries.map((d) => d.delivery_id));
  return deliveries;
}
