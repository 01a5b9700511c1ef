// One trace from the local stack (docs/design/tracing.md, "A trace from the local stack"): runs
// `examples/local-stack.mjs` with tracing on, exporting OTLP/JSON to a receiver in this script;
// pm's turn (a span of its runtime) sends a task to qa through pm's sidecar; qa's runtime takes
// it with the typed client (its handler runs in a `process` span, a child of the message) and
// answers; pm takes the answer. Then it writes the spans of pm's trace, and of the hand-overs
// linked to it, to docs/trace/local-stack-spans.json and draws them as docs/trace/local-stack.svg
// (docs/trace/waterfall.mjs).
//
//   npm run build && node examples/trace.mjs [OUT_DIR]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { context, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { GatewayClient } from 'agent-gateway/client';
import { renderWaterfall } from '../docs/trace/waterfall.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = process.argv[2] ?? join(root, 'docs', 'trace');

// ---- a receiver of OTLP/JSON: every span kept, in the waterfall's shape
const spans = [];
const hex = (id) => (id ? String(id).toLowerCase() : undefined);
const value = (v) =>
  v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.doubleValue);
const attrs = (list = []) => Object.fromEntries(list.map((a) => [a.key, value(a.value ?? {})]));
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => {
    body += c;
  });
  req.on('end', () => {
    for (const rs of JSON.parse(body).resourceSpans ?? []) {
      const resource = attrs(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? [])
        for (const s of ss.spans ?? [])
          spans.push({
            traceId: hex(s.traceId),
            spanId: hex(s.spanId),
            ...(s.parentSpanId ? { parentSpanId: hex(s.parentSpanId) } : {}),
            name: s.name,
            kind: s.kind,
            startNs: String(s.startTimeUnixNano),
            endNs: String(s.endTimeUnixNano),
            attributes: attrs(s.attributes),
            events: (s.events ?? []).map((e) => ({
              name: e.name,
              timeNs: String(e.timeUnixNano),
              attributes: attrs(e.attributes),
            })),
            links: (s.links ?? []).map((l) => ({
              traceId: hex(l.traceId),
              spanId: hex(l.spanId),
              attributes: attrs(l.attributes),
            })),
            status: { code: s.status?.code ?? 0 },
            service: String(resource['service.name'] ?? ''),
          });
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
const endpoint = `http://127.0.0.1:${receiver.address().port}`;

// ---- the local stack, tracing on
const data = mkdtempSync(join(tmpdir(), 'agw-trace-'));
const stack = spawn(process.execPath, [join(root, 'examples', 'local-stack.mjs')], {
  env: {
    ...process.env,
    STACK_ADAPTER_PORT: '0',
    STACK_SIDECAR_PORT: '0',
    STACK_DATA: data,
    // pm and qa are driven here, by hand: the stack's demo agents leave their inboxes alone
    STACK_HANDS_ON: 'pm,qa',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
  },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const urls = await new Promise((resolve, reject) => {
  const found = {};
  createInterface({ input: stack.stdout }).on('line', (line) => {
    const m = /^\s+sidecar (\S+)\s+(http:\S+)/.exec(line);
    if (m) found[m[1]] = m[2];
    if (line.includes('console:')) resolve(found);
  });
  stack.once('exit', (code) => reject(new Error(`the local stack exited (${code})`)));
});

// ---- the agents' runtimes: OpenTelemetry's Node SDK, as an agent would set it up
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'agent runtimes (pm, qa)' }),
  spanProcessors: [
    new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${endpoint}/v1/traces` })),
  ],
});
provider.register();
const tracer = trace.getTracer('example');
const pm = new GatewayClient({ url: urls.pm });
const qa = new GatewayClient({ url: urls.qa });

// one exchange first, untraced by the runtimes, so the picture shows warm programs, not the
// first request's connection set-up and code loading
await pm.send({ to: '@qa', kind: 'status', payload: { text: 'warm-up' } });
const warm = new AbortController();
await qa.receive(async () => warm.abort(), { signal: warm.signal, waitS: 5, trace: false });

const turn = tracer.startSpan('pm: plan the release (one turn)');
const traceId = turn.spanContext().traceId;
await context.with(trace.setSpan(context.active(), turn), async () => {
  await new Promise((r) => setTimeout(r, 15)); // the model thinks
  await pm.send({
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-7', description: 'test the release candidate' },
  });
});
turn.end();

const qaDone = new AbortController();
await qa.receive(
  async (m) => {
    await tracer.startActiveSpan('qa: run the tests', async (work) => {
      await new Promise((r) => setTimeout(r, 40));
      work.end();
    });
    await qa.send({
      to: `@${m.sender}`,
      kind: 'task/result',
      payload: { task_id: 'T-7', status: 'success' },
      reply_to: m.message_id,
    });
    qaDone.abort();
  },
  { signal: qaDone.signal, waitS: 5 },
);
const pmDone = new AbortController();
await pm.receive(
  async () => {
    pmDone.abort();
  },
  { signal: pmDone.signal, waitS: 5 },
);

// ---- stop (each program exports what it holds as it stops), keep the trace, draw it
await new Promise((r) => setTimeout(r, 500));
stack.kill('SIGTERM');
await new Promise((r) => stack.once('exit', r));
await provider.shutdown();
receiver.close();
rmSync(data, { recursive: true, force: true });

const inTrace = spans.filter((s) => s.traceId === traceId);
const ids = new Set(inTrace.map((s) => s.spanId));
// the hand-overs are in their pollers' traces, linked to the messages of this one
const linked = spans.filter(
  (s) => s.traceId !== traceId && s.links.some((l) => l.traceId === traceId && ids.has(l.spanId)),
);
const kept = [...inTrace, ...linked].sort((a, b) =>
  BigInt(a.startNs) < BigInt(b.startNs) ? -1 : 1,
);
writeFileSync(join(out, 'local-stack-spans.json'), `${JSON.stringify(kept, null, 1)}\n`);
writeFileSync(join(out, 'local-stack.svg'), renderWaterfall(kept));
console.log(
  `trace ${traceId}: ${inTrace.length} spans, ${linked.length} linked hand-overs → ${join(out, 'local-stack.svg')}`,
);
for (const s of kept) {
  const ms = (Number(BigInt(s.endNs) - BigInt(s.startNs)) / 1e6).toFixed(2);
  console.log(`  ${s.service.padEnd(24)} ${s.name.padEnd(34)} ${ms.padStart(7)} ms`);
}
