/**
 * One trace from an agent's turn to the recipient's handling (CONTRACT.md, "Trace context"):
 * the built adapter and two sidecars as child processes, exporting to a real OTLP/HTTP receiver
 * in this test (protobuf from one program, JSON from the others). pm's `traceparent` goes through
 * pm's sidecar (`send`), the adapter (`send`, `commit`), qa's sidecar and the adapter again
 * (`receive`, linked to the message), qa's fetch (the delivered message's context) and qa's ack
 * (`settle`); and across an adapter SIGKILL with the message queued in pm's outbox (`forward`).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ChildAdapter,
  type ChildSidecar,
  spawnAdapter,
  spawnSidecar,
} from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/otlp-receiver.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const PRODUCER = 4;
const CONSUMER = 5;
const hex = (bytes: number) => randomBytes(bytes).toString('hex');

const { dir, cleanup } = tempDir('agw-trace-');
const topology = writeTopology(dir);
const db = join(dir, 'adapter.db');
let receiver: OtlpReceiver;
const running: (ChildAdapter | ChildSidecar)[] = [];
let adapter: ChildAdapter;
let pm: ChildSidecar;
let qa: ChildSidecar;

/** The OTEL_* settings of one program: export at once-ish (100 ms batches) to the receiver. */
function otel(protocol: 'http/protobuf' | 'http/json', extra: Record<string, string> = {}) {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    ...extra,
  };
}

async function startAdapter(port = 0): Promise<ChildAdapter> {
  const a = await spawnAdapter(
    ['--topology', topology, '--db', db, '--listen', `127.0.0.1:${port}`],
    otel('http/protobuf'),
  );
  running.push(a);
  return a;
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

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  adapter = await startAdapter();
  [pm, qa] = await Promise.all([startSidecar('pm', adapter.url), startSidecar('qa', adapter.url)]);
  for (const s of [pm, qa])
    await until(async () => (await call(s.url, 'GET', '/readyz')).status === 200, 'start gate');
}, 60_000);

afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await Promise.all(running.map((p) => p.exited));
  await receiver?.close();
  cleanup();
});

const byName = (spans: ReceivedSpan[], service: string, name: string) =>
  spans.filter((s) => s.service === service && s.name === name);
const ids = (traceparent: string) => ({
  traceId: traceparent.slice(3, 35),
  spanId: traceparent.slice(36, 52),
});

/** qa's turn: a fetch in its own trace, the delivery handed over, acked in the same trace. */
async function qaTakes(messageId: string, { carried = false } = {}) {
  const fetchTrace = `00-${hex(16)}-${hex(8)}-01`;
  let delivery: Json | undefined;
  await until(async () => {
    const r = await call(qa.url, 'GET', '/v1/inbox?wait=2&max=10', {
      headers: { traceparent: fetchTrace },
    });
    delivery = (r.body.deliveries as Json[]).find((d) => d.message.message_id === messageId);
    return delivery !== undefined;
  }, `qa receives ${messageId}`);
  // acked on its own, or carried on the next poll (as the client does)
  const ack = await call(qa.url, 'POST', carried ? '/v1/inbox?wait=0' : '/v1/acks', {
    headers: { traceparent: fetchTrace },
    body: { delivery_ids: [delivery.delivery_id] },
  });
  expect(ack.status).toBe(200);
  expect(ack.body.acked).toEqual([delivery.delivery_id]);
  return { delivery, fetchTrace };
}

describe('one trace across both sidecars and the adapter', () => {
  it("from pm's traceparent to qa's fetch and ack", { timeout: 60_000 }, async () => {
    const turn = `00-${hex(16)}-${hex(8)}-01`;
    const T = ids(turn);
    const sent = await call(pm.url, 'POST', '/v1/messages', {
      headers: { traceparent: turn, tracestate: 'orchestrator=turn1' },
      body: { to: 'product', kind: 'task/request', payload: { task_id: 'T-1', description: 'd' } },
    });
    expect(sent.status).toBe(201);
    // the message's context is pm's sidecar's send span, in pm's trace
    const stored = ids(sent.body.traceparent as string);
    expect(stored.traceId).toBe(T.traceId);
    expect(stored.spanId).not.toBe(T.spanId);
    expect(sent.body.tracestate).toBe('orchestrator=turn1');

    const { delivery, fetchTrace } = await qaTakes(sent.body.message_id);
    expect(delivery.message.traceparent).toBe(sent.body.traceparent);
    expect(delivery.message.tracestate).toBe('orchestrator=turn1');
    const F = ids(fetchTrace);
    // each program exports on its own schedule: wait for every span the trace is made of
    const has = (s: ReceivedSpan[], trace: string, service: string, name: RegExp) =>
      s.some((x) => x.traceId === trace && x.service === service && name.test(x.name));
    const spans = await receiver.waitFor(
      (s) =>
        has(s, T.traceId, 'agent-gateway-sidecar', /^send product$/) &&
        has(s, T.traceId, 'agent-gateway-adapter', /^send product$/) &&
        has(s, T.traceId, 'agent-gateway-adapter', /^commit$/) &&
        has(s, F.traceId, 'agent-gateway-sidecar', /^receive product$/) &&
        has(s, F.traceId, 'agent-gateway-adapter', /^receive product$/) &&
        has(s, F.traceId, 'agent-gateway-sidecar', /^settle product$/) &&
        has(s, F.traceId, 'agent-gateway-adapter', /^settle /),
    );
    const mine = spans.filter((s) => s.traceId === T.traceId);
    // pm's sidecar: send, a child of pm's span; its id is the stored context
    const [pmSend] = byName(mine, 'agent-gateway-sidecar', 'send product');
    expect(pmSend).toMatchObject({ kind: PRODUCER, parentSpanId: T.spanId, spanId: stored.spanId });
    expect(pmSend!.attributes).toMatchObject({
      'messaging.system': 'agent-gateway',
      'messaging.destination.name': 'product',
      'messaging.message.id': sent.body.message_id,
      'messaging.operation.type': 'send',
    });
    expect(pmSend!.protocol).toBe('json');
    // the adapter: send, a child of the message's context; the commit a child of that
    const [aSend] = byName(mine, 'agent-gateway-adapter', 'send product');
    expect(aSend).toMatchObject({ kind: PRODUCER, parentSpanId: stored.spanId });
    expect(aSend!.attributes).toMatchObject({
      'messaging.message.id': sent.body.message_id,
      'agw.thread_id': sent.body.message_id,
      'agw.hop': 0,
    });
    expect(aSend!.protocol).toBe('protobuf');
    const [commit] = byName(mine, 'agent-gateway-adapter', 'commit');
    expect(commit!.parentSpanId).toBe(aSend!.spanId);

    // the hand-over: qa's sidecar's receive in qa's fetch trace, the adapter's its child; each
    // linked to the message's context, with the attempt
    const linkedToMessage = (s: ReceivedSpan) =>
      s.links.some((l) => l.traceId === T.traceId && l.spanId === stored.spanId);
    const qaReceive = byName(spans, 'agent-gateway-sidecar', 'receive product').find(
      linkedToMessage,
    );
    expect(qaReceive).toMatchObject({ kind: CONSUMER, traceId: F.traceId, parentSpanId: F.spanId });
    expect(qaReceive!.attributes).toMatchObject({
      'messaging.message.id': sent.body.message_id,
      'agw.attempt': 1,
      'agw.recipient': 'qa',
    });
    const aReceive = byName(spans, 'agent-gateway-adapter', 'receive product').find(
      linkedToMessage,
    );
    expect(aReceive).toMatchObject({
      kind: CONSUMER,
      traceId: F.traceId,
      parentSpanId: qaReceive!.spanId,
    });
    expect(aReceive!.links[0]!.attributes).toMatchObject({ 'agw.attempt': 1 });
    // the ack: settle at qa's sidecar (linked to the message), the adapter's its child
    const qaSettle = byName(spans, 'agent-gateway-sidecar', 'settle product').find(linkedToMessage);
    expect(qaSettle).toMatchObject({ traceId: F.traceId, parentSpanId: F.spanId });
    expect(qaSettle!.attributes).toMatchObject({ 'messaging.operation.name': 'ack' });
    const aSettle = spans.find(
      (s) => s.service === 'agent-gateway-adapter' && s.parentSpanId === qaSettle!.spanId,
    );
    expect(aSettle?.name).toMatch(/^settle /);
  });

  it('goes on across an adapter SIGKILL with the message queued in the outbox', {
    timeout: 90_000,
  }, async () => {
    const port = Number(new URL(adapter.url).port);
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    const turn = `00-${hex(16)}-${hex(8)}-01`;
    const T = ids(turn);
    const queued = await call(pm.url, 'POST', '/v1/messages', {
      headers: { traceparent: turn },
      body: { to: 'product', kind: 'status', payload: { during: 'outage' } },
    });
    expect(queued.status).toBe(202);
    const stored = ids(queued.body.traceparent as string);
    expect(stored.traceId).toBe(T.traceId);
    adapter = await startAdapter(port);
    await until(
      async () => (await call(pm.url, 'GET', '/v1/status')).body.outbox.depth === 0,
      'the drain',
    );
    // both programs export on their own schedule: wait for the adapter's send and the
    // sidecar's forward that took it
    const spans = await receiver.waitFor(
      (s) =>
        s.some(
          (x) =>
            x.traceId === T.traceId &&
            x.service === 'agent-gateway-adapter' &&
            x.name === 'send product',
        ) &&
        s.some(
          (x) =>
            x.traceId === T.traceId &&
            x.name === 'forward product' &&
            x.attributes['messaging.message.id'] !== undefined,
        ),
    );
    const mine = spans.filter((s) => s.traceId === T.traceId);
    const [pmSend] = byName(mine, 'agent-gateway-sidecar', 'send product');
    expect(pmSend).toMatchObject({ parentSpanId: T.spanId, spanId: stored.spanId });
    expect(pmSend!.events.map((e) => e.name)).toContain('queued');
    // the later forwarding, from the outbox, in the same trace
    // (a try while the adapter was still away is a failed span of its own)
    const forwards = byName(mine, 'agent-gateway-sidecar', 'forward product');
    const forward = forwards.find((f) => f.attributes['messaging.message.id'] !== undefined);
    expect(forward).toMatchObject({ kind: PRODUCER, parentSpanId: stored.spanId });
    expect(forward!.attributes).toMatchObject({ 'agw.outbox': true });
    expect(forwards.filter((f) => f !== forward).every((f) => f.status.code === 2)).toBe(true);
    const [aSend] = byName(mine, 'agent-gateway-adapter', 'send product');
    expect(aSend!.parentSpanId).toBe(stored.spanId);
    const messageId = aSend!.attributes['messaging.message.id'] as string;
    const { delivery, fetchTrace } = await qaTakes(messageId, { carried: true });
    expect(delivery.message.traceparent).toBe(queued.body.traceparent);
    // the ack carried on a poll: settled in the poller's trace, linked to the message
    const F = ids(fetchTrace);
    const settled = await receiver.waitFor(
      (s) =>
        s.some(
          (x) =>
            x.traceId === F.traceId &&
            x.service === 'agent-gateway-sidecar' &&
            x.name === 'settle product',
        ) &&
        s.some(
          (x) =>
            x.traceId === F.traceId &&
            x.service === 'agent-gateway-adapter' &&
            x.name.startsWith('settle '),
        ),
    );
    const qaSettle = settled.find(
      (x) =>
        x.traceId === F.traceId &&
        x.service === 'agent-gateway-sidecar' &&
        x.name === 'settle product',
    )!;
    expect(qaSettle).toMatchObject({ parentSpanId: F.spanId });
    expect(qaSettle.attributes).toMatchObject({
      'agw.carried_on_poll': true,
      'messaging.operation.name': 'ack',
    });
    expect(qaSettle.links).toEqual([
      expect.objectContaining({ traceId: T.traceId, spanId: stored.spanId }),
    ]);
  });
});

describe('a dead letter in the trace of its message', () => {
  it('a rejection is an event on the settle span; an expired last lease, on a settle span in the message trace', {
    timeout: 60_000,
  }, async () => {
    // an adapter of its own: a 200 ms lease and no retry, so one unacked lease dead-letters
    const { dir: own, cleanup: done } = tempDir('agw-trace-dl-');
    const short = await spawnAdapter(
      [
        '--topology',
        writeTopology(own),
        '--db',
        join(own, 'a.db'),
        '--lease-ms',
        '200',
        '--max-retries',
        '0',
      ],
      otel('http/json', { OTEL_SERVICE_NAME: 'short-lease-adapter' }),
    );
    running.push(short);
    try {
      const send = async () => {
        const t = `00-${hex(16)}-${hex(8)}-01`;
        const r = await call(short.url, 'POST', '/v1/messages', {
          agent: 'pm',
          body: {
            idempotency_key: randomUUID(),
            to: '@qa',
            kind: 'status',
            payload: {},
            traceparent: t,
          },
        });
        expect(r.status).toBe(201);
        return { id: r.body.message_id as string, ...ids(t) };
      };
      const rejected = await send();
      const expired = await send();
      const got = (await call(short.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' })).body
        .deliveries as Json[];
      const of = (id: string) => got.find((d) => d.message.message_id === id)!.delivery_id;
      const nack = await call(short.url, 'POST', '/v1/nacks', {
        agent: 'qa',
        body: { delivery_ids: [of(rejected.id)], retry: false, reason: 'cannot' },
      });
      expect(nack.status).toBe(200);
      // the other lease runs out unacked: its only attempt is spent
      const spans = await receiver.waitFor((s) =>
        s.some(
          (x) =>
            x.service === 'short-lease-adapter' &&
            x.traceId === expired.traceId &&
            x.events.some((e) => e.name === 'dead_letter'),
        ),
      );
      const settle = spans.find(
        (x) =>
          x.service === 'short-lease-adapter' &&
          x.attributes['messaging.operation.name'] === 'nack',
      );
      expect(settle?.events).toEqual([
        expect.objectContaining({
          name: 'dead_letter',
          attributes: expect.objectContaining({ 'agw.reason': 'rejected' }),
        }),
      ]);
      const dead = spans.find(
        (x) =>
          x.service === 'short-lease-adapter' &&
          x.traceId === expired.traceId &&
          x.name === 'settle @qa',
      );
      expect(dead).toMatchObject({ parentSpanId: expired.spanId });
      expect(dead!.attributes).toMatchObject({
        'messaging.message.id': expired.id,
        'messaging.operation.name': 'dead_letter',
        'agw.recipient': 'qa',
      });
      expect(dead!.events[0]).toMatchObject({
        name: 'dead_letter',
        attributes: { 'agw.reason': 'lease_expired', 'agw.recipient': 'qa' },
      });
      // the rejection is told once: on its settle span, not again from the commit
      expect(
        spans.filter((x) => x.traceId === rejected.traceId && x.name === 'settle @qa'),
      ).toEqual([]);
    } finally {
      short.child.kill('SIGKILL');
      await short.exited;
      done();
    }
  });
});
