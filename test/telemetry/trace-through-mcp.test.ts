/**
 * Trace context through the MCP tools (CONTRACT.md, "Trace context"; docs/reference/mcp.md): a
 * tool call's `_meta.traceparent` is the caller's context, as a request's `traceparent` header
 * is, and a result's `_meta.traceparent` is the context of the message it is about. The built
 * adapter and two sidecars as child processes, exporting to a real OTLP/HTTP receiver in this
 * test; the SDK's own Client over the sidecar's Streamable HTTP `/mcp` and over `agent-gateway
 * mcp` on stdio (which passes `_meta.traceparent` on to the sidecar as the `traceparent` header).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ChildAdapter,
  type ChildSidecar,
  CLI,
  spawnAdapter,
  spawnSidecar,
} from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { connectClient, type McpSession } from '../helpers/mcp.js';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/otlp-receiver.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const PRODUCER = 4;
const CONSUMER = 5;
const SIDECAR = 'agent-gateway-sidecar';
const ADAPTER = 'agent-gateway-adapter';
const hex = (bytes: number) => randomBytes(bytes).toString('hex');
const newTraceparent = () => `00-${hex(16)}-${hex(8)}-01`;
const ids = (traceparent: string) => ({
  traceId: traceparent.slice(3, 35),
  spanId: traceparent.slice(36, 52),
});

const { dir, cleanup } = tempDir('agw-trace-mcp-');
const topology = writeTopology(dir);
let receiver: OtlpReceiver;
const running: (ChildAdapter | ChildSidecar)[] = [];
/** `agent-gateway mcp` processes, stopped by their pid after the file. */
const mcpPids: number[] = [];
const sessions: McpSession[] = [];
let adapter: ChildAdapter;
let pm: ChildSidecar;
let qa: ChildSidecar;

/** The OTEL_* settings of one program: export at once-ish (100 ms batches) to the receiver. */
function otel(protocol: 'http/protobuf' | 'http/json') {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
}

async function startSidecar(agent: string, adapterUrl: string): Promise<ChildSidecar> {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: adapterUrl,
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: join(dir, `outbox-${agent}.db`),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '400',
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    ...otel('http/json'),
  });
  running.push(s);
  return s;
}

/** The SDK's Client on a sidecar's Streamable HTTP `/mcp`. */
async function overHttp(sidecar: ChildSidecar): Promise<Client> {
  const session = await connectClient(
    new StreamableHTTPClientTransport(new URL(`${sidecar.url}/mcp`)),
  );
  sessions.push(session);
  return session.client;
}

/** `agent-gateway mcp` for a sidecar, started by the SDK's stdio transport (no OTEL_* of its own). */
async function overStdio(sidecar: ChildSidecar): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: sidecar.url },
    stderr: 'pipe',
  });
  const session = await connectClient(transport);
  mcpPids.push(transport.pid!);
  sessions.push(session);
  return session.client;
}

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  adapter = await spawnAdapter(
    ['--topology', topology, '--db', join(dir, 'adapter.db'), '--listen', '127.0.0.1:0'],
    otel('http/protobuf'),
  );
  running.push(adapter);
  [pm, qa] = await Promise.all([startSidecar('pm', adapter.url), startSidecar('qa', adapter.url)]);
  for (const s of [pm, qa])
    await until(async () => (await call(s.url, 'GET', '/readyz')).status === 200, 'start gate');
}, 60_000);

afterAll(async () => {
  for (const s of sessions) await s.client.close().catch(() => undefined);
  for (const pid of mcpPids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {} // already gone
  }
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await Promise.all(running.map((p) => p.exited));
  await receiver?.close();
  cleanup();
});

/** A tool call with `_meta`; its structuredContent, its `_meta`, and its text checked equal. */
async function callWithMeta(
  client: Client,
  name: string,
  args: Record<string, unknown>,
  meta?: Record<string, unknown>,
): Promise<{ isError: boolean; json: Json; meta: Json }> {
  const r = await client.callTool({
    name,
    arguments: args,
    ...(meta === undefined ? {} : { _meta: meta }),
  });
  const content = r.content as { type: string; text: string }[];
  expect(JSON.parse(content[0]!.text)).toEqual(r.structuredContent);
  return { isError: r.isError === true, json: r.structuredContent, meta: r._meta };
}

const has = (s: ReceivedSpan[], trace: string, service: string, name: string) =>
  s.some((x) => x.traceId === trace && x.service === service && x.name === name);
const find = (s: ReceivedSpan[], trace: string, service: string, name: string) =>
  s.filter((x) => x.traceId === trace && x.service === service && x.name === name);

/** pm's sidecar's `send <to>` span of a message, once exported. */
async function sendSpanOf(messageId: string): Promise<ReceivedSpan> {
  const isIt = (x: ReceivedSpan) =>
    x.service === SIDECAR &&
    x.name.startsWith('send ') &&
    x.attributes['messaging.message.id'] === messageId;
  const spans = await receiver.waitFor((s) => s.some(isIt));
  return spans.find(isIt)!;
}

describe("a tool call's _meta.traceparent", () => {
  it("over /mcp: a send's result carries its message's context, and a fetch's the delivered message's, in the caller's traces", {
    timeout: 60_000,
  }, async () => {
    const pmMcp = await overHttp(pm);
    const qaMcp = await overHttp(qa);
    // pm's turn: send_message with its context in _meta
    const turn = newTraceparent();
    const T = ids(turn);
    const sent = await callWithMeta(
      pmMcp,
      'send_message',
      { to: 'product', kind: 'task/request', payload: { task_id: 'T-1', description: 'd' } },
      { traceparent: turn, tracestate: 'orchestrator=turn1' },
    );
    expect(sent.isError).toBe(false);
    expect(sent.json).toMatchObject({ status: 'delivered', channel: 'product' });
    const messageId = sent.json.message_id as string;
    // the message's context: in pm's trace, a new span (pm's sidecar's send)
    const storedTp = sent.meta?.traceparent as string;
    expect(storedTp).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const stored = ids(storedTp);
    expect(stored.traceId).toBe(T.traceId);
    expect(stored.spanId).not.toBe(T.spanId);
    expect(sent.json.traceparent).toBe(storedTp);
    expect(sent.meta.tracestate).toBe('orchestrator=turn1');
    expect(sent.json.tracestate).toBe('orchestrator=turn1');

    // qa's turn: fetch_inbox in a trace of its own
    const fetchTp = newTraceparent();
    const F = ids(fetchTp);
    let fetched: { isError: boolean; json: Json; meta: Json } | undefined;
    await until(async () => {
      fetched = await callWithMeta(
        qaMcp,
        'fetch_inbox',
        { wait_seconds: 2 },
        { traceparent: fetchTp },
      );
      return !fetched.isError && (fetched.json.deliveries as Json[]).length > 0;
    }, `qa fetches ${messageId}`);
    const deliveries = fetched!.json.deliveries as Json[];
    expect(deliveries).toHaveLength(1);
    const [d] = deliveries;
    expect(d.message).toMatchObject({
      message_id: messageId,
      sender: 'pm',
      traceparent: storedTp,
      tracestate: 'orchestrator=turn1',
    });
    // the result's _meta is the delivered message's context, not qa's own
    expect(fetched!.meta).toEqual({ traceparent: storedTp, tracestate: 'orchestrator=turn1' });
    const acked = await callWithMeta(
      qaMcp,
      'ack',
      { delivery_ids: [d.delivery_id] },
      { traceparent: fetchTp },
    );
    expect(acked.json.acked).toEqual([d.delivery_id]);

    // each program exports on its own schedule: wait for every span asserted on
    const spans = await receiver.waitFor(
      (s) =>
        has(s, T.traceId, SIDECAR, 'send product') &&
        has(s, T.traceId, ADAPTER, 'send product') &&
        has(s, T.traceId, ADAPTER, 'commit') &&
        has(s, F.traceId, SIDECAR, 'receive product') &&
        has(s, F.traceId, ADAPTER, 'receive product') &&
        has(s, F.traceId, SIDECAR, 'settle product'),
    );
    // pm's sidecar's send: a child of _meta's span, and its id the stored context
    const [pmSend, ...moreSends] = find(spans, T.traceId, SIDECAR, 'send product');
    expect(moreSends).toEqual([]);
    expect(pmSend).toMatchObject({ kind: PRODUCER, parentSpanId: T.spanId, spanId: stored.spanId });
    expect(pmSend!.attributes).toMatchObject({
      'messaging.destination.name': 'product',
      'messaging.message.id': messageId,
      'agw.sender': 'pm',
    });
    // the adapter's send: a child of the message's context
    const [aSend] = find(spans, T.traceId, ADAPTER, 'send product');
    expect(aSend).toMatchObject({ kind: PRODUCER, parentSpanId: stored.spanId });
    expect(aSend!.attributes['messaging.message.id']).toBe(messageId);
    const [commit] = find(spans, T.traceId, ADAPTER, 'commit');
    expect(commit!.parentSpanId).toBe(aSend!.spanId);

    // qa's sidecar's receive: in qa's fetch trace, a child of _meta's span, linked to the message
    const linkedToMessage = (s: ReceivedSpan) =>
      s.links.some((l) => l.traceId === T.traceId && l.spanId === stored.spanId);
    const qaReceive = find(spans, F.traceId, SIDECAR, 'receive product').find(linkedToMessage);
    expect(qaReceive).toMatchObject({ kind: CONSUMER, parentSpanId: F.spanId });
    expect(qaReceive!.attributes).toMatchObject({
      'messaging.message.id': messageId,
      'agw.recipient': 'qa',
      'agw.attempt': 1,
    });
    const link = qaReceive!.links.find((l) => l.spanId === stored.spanId)!;
    expect(link.attributes).toMatchObject({ 'messaging.message.id': messageId, 'agw.attempt': 1 });
    // the adapter's receive: its child
    const aReceive = find(spans, F.traceId, ADAPTER, 'receive product').find(linkedToMessage);
    expect(aReceive).toMatchObject({ kind: CONSUMER, parentSpanId: qaReceive!.spanId });
    // qa's ack, in the same trace, linked to the message
    const qaSettle = find(spans, F.traceId, SIDECAR, 'settle product').find(linkedToMessage);
    expect(qaSettle).toMatchObject({ parentSpanId: F.spanId });
  });

  it("over agent-gateway mcp on stdio: a send lands with pm's sidecar's send span as a child of it", {
    timeout: 60_000,
  }, async () => {
    const pmStdio = await overStdio(pm);
    const turn = newTraceparent();
    const T = ids(turn);
    const sent = await callWithMeta(
      pmStdio,
      'send_message',
      { to: '@research', kind: 'status', payload: { over: 'stdio' } },
      { traceparent: turn, tracestate: 'stdio=1' },
    );
    expect(sent.isError).toBe(false);
    expect(sent.json).toMatchObject({ status: 'delivered', channel: '@research' });
    const storedTp = sent.meta?.traceparent as string;
    const stored = ids(storedTp);
    expect(stored.traceId).toBe(T.traceId);
    expect(stored.spanId).not.toBe(T.spanId);
    expect(sent.json.traceparent).toBe(storedTp);
    expect(sent.meta.tracestate).toBe('stdio=1');

    const spans = await receiver.waitFor(
      (s) =>
        has(s, T.traceId, SIDECAR, 'send @research') &&
        has(s, T.traceId, ADAPTER, 'send @research'),
    );
    const [pmSend] = find(spans, T.traceId, SIDECAR, 'send @research');
    expect(pmSend).toMatchObject({ kind: PRODUCER, parentSpanId: T.spanId, spanId: stored.spanId });
    expect(pmSend!.attributes['messaging.message.id']).toBe(sent.json.message_id);
    const [aSend] = find(spans, T.traceId, ADAPTER, 'send @research');
    expect(aSend!.parentSpanId).toBe(stored.spanId);
    // the stored message carries it
    const status = await callWithMeta(pmStdio, 'message_status', {
      message_id: sent.json.message_id,
    });
    expect(status.json.message.traceparent).toBe(storedTp);
    expect(status.meta).toEqual({ traceparent: storedTp, tracestate: 'stdio=1' });
  });

  const MALFORMED: [string, unknown][] = [
    ['upper-case hex', `00-ABCDEF${hex(13)}-${hex(8)}-01`],
    ['an all-zero trace id', `00-${'0'.repeat(32)}-${hex(8)}-01`],
    ['version ff', `ff-${hex(16)}-${hex(8)}-01`],
    ['version 00 with a fifth part', `${newTraceparent()}-extra`],
    ['no traceparent at all', 'not a traceparent'],
    ['a number', 42],
  ];

  for (const transport of ['/mcp', 'stdio'] as const) {
    it(`over ${transport}: a malformed _meta.traceparent is ignored: the send succeeds in a new trace`, {
      timeout: 60_000,
    }, async () => {
      const client = transport === '/mcp' ? await overHttp(pm) : await overStdio(pm);
      for (const [what, bad] of MALFORMED) {
        const sent = await callWithMeta(
          client,
          'send_message',
          { to: '@research', kind: 'status', payload: { malformed: what } },
          { traceparent: bad, tracestate: 'ignored=1' },
        );
        expect(sent.isError, what).toBe(false);
        expect(sent.json.status, what).toBe('delivered');
        const storedTp = sent.meta?.traceparent as string;
        expect(storedTp, what).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        expect(sent.json.traceparent, what).toBe(storedTp);
        // a tracestate without a valid traceparent goes with it
        expect(sent.meta.tracestate, what).toBeUndefined();
        const stored = ids(storedTp);
        if (typeof bad === 'string')
          expect(stored.traceId, what).not.toBe(ids(bad.toLowerCase()).traceId);
        // pm's sidecar's send span is the root of a new trace, and the message's context
        const span = await sendSpanOf(sent.json.message_id);
        expect(span, what).toMatchObject({ traceId: stored.traceId, spanId: stored.spanId });
        expect(span.parentSpanId, what).toBeUndefined();
      }
    });
  }
});
