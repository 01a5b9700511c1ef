/**
 * A minimal agent runtime on the typed client: it heartbeats, answers every task/request it
 * receives with a task/result, rejects for good a request it can never handle, and raises an
 * emergency if its handler keeps failing. A long task needs nothing special: while the handler
 * runs, the receive loop extends the message's lease, so it is not handed out again.
 *
 * Type-checked with the tests; run it with any TypeScript runner against a sidecar of the local
 * stack (`npm start`): AGENT_SIDECAR=http://127.0.0.1:7073 (qa).
 */
import {
  GatewayClient,
  isPermanentError,
  type Message,
  PermanentError,
} from 'agent-gateway/client';

// Traces (docs/design/tracing.md): with OTEL_EXPORTER_OTLP_ENDPOINT set, OpenTelemetry's Node
// SDK is registered, and each handler below runs in a `process <channel>` span that the client
// starts as a child of the delivered message's traceparent: this agent's work, and the reply it
// sends, continue the sender's trace. Any OpenTelemetry setup does; this is the smallest.
if (process.env.OTEL_EXPORTER_OTLP_ENDPOINT) {
  const { BatchSpanProcessor, NodeTracerProvider } = await import('@opentelemetry/sdk-trace-node');
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME ?? 'agent' }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register();
  process.once('beforeExit', () => void provider.shutdown());
}

const gw = new GatewayClient({ url: process.env.AGENT_SIDECAR ?? 'http://127.0.0.1:7070' });
const controller = new AbortController();
process.once('SIGTERM', () => controller.abort());
process.once('SIGINT', () => controller.abort());

const beat = setInterval(() => {
  gw.heartbeat().then(
    (q) => console.log(`heartbeat: ${q.pending} pending (${q.critical_pending} critical)`),
    (err: unknown) => console.error('heartbeat failed:', (err as Error).message),
  );
}, 10_000);

/** What this agent can do; a task/request may name one as `payload.skill`. */
const SKILLS = new Set(['test', 'review']);

let failures = 0;
async function handle(m: Message): Promise<void> {
  console.log(`#${m.channel_sequence_id} in ${m.channel} from ${m.sender}: ${m.kind}`);
  if (m.kind !== 'task/request') return;
  const skill = String(m.payload.skill ?? 'test');
  if (!SKILLS.has(skill)) {
    // never handleable here: dead-lettered at once (reason `rejected`, this text as its note),
    // and the channel's next message comes; retrying would only hold the channel up
    throw new PermanentError(`no skill "${skill}" in this agent`);
  }
  // ... do the work, minutes if need be: the lease is extended while this runs. Throwing any
  // other error nacks the delivery and it comes again after a backoff.
  await longTask(String(m.payload.description));
  await gw.send({
    to: `@${m.sender}`,
    kind: 'task/result',
    payload: { task_id: String(m.payload.task_id), status: 'success' },
    // derived from the request: a retry of this reply is recognised as the same message
    idempotency_key: `result-${m.message_id}`,
  });
}

/** Stands for the agent's real work (a model call, a build): here, a minute of waiting. */
function longTask(description: string): Promise<void> {
  console.log(`working on: ${description}`);
  return new Promise((resolve) => setTimeout(resolve, 60_000));
}

await gw.receive(handle, {
  signal: controller.signal,
  onError: (err, d) => {
    console.error(
      `delivery ${d.delivery_id} failed (attempt ${d.attempt}):`,
      (err as Error).message,
    );
    if (isPermanentError(err)) return; // rejected on purpose: not the handler failing
    if (++failures >= 5) {
      void gw.emergency('manual', `the agent's handler failed ${failures} times in a row`);
      failures = 0;
    }
  },
  onLeaseError: (err, ids) => console.error(`lease of ${ids.join(',')}:`, (err as Error).message),
});
clearInterval(beat);
