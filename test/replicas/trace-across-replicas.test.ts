/**
 * One trace across adapter replicas on PostgreSQL (CONTRACT.md, "Trace context"): two replicas
 * of the built adapter, each exporting to a real OTLP/HTTP receiver in this test with its own
 * `service.instance.id` (OTEL_RESOURCE_ATTRIBUTES), pm's sidecar on replica 0 and qa's on
 * replica 1. pm's send is stored through replica 0 with its context; qa's fetch through replica
 * 1 hands it over with that context, and replica 1's `receive` is in qa's trace, linked to it.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ChildSidecar, spawnSidecar } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/otlp-receiver.js';
import { type ReplicaSet, startReplicaSet } from '../helpers/replicas.js';
import { tokenOf } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const PRODUCER = 4;
const CONSUMER = 5;
const SIDECAR = 'agent-gateway-sidecar';
const ADAPTER = 'agent-gateway-adapter';
const hex = (bytes: number) => randomBytes(bytes).toString('hex');
const ids = (traceparent: string) => ({
  traceId: traceparent.slice(3, 35),
  spanId: traceparent.slice(36, 52),
});

let receiver: OtlpReceiver;
let set: ReplicaSet;
const sidecars: ChildSidecar[] = [];
let pm: ChildSidecar;
let qa: ChildSidecar;

/** The OTEL_* settings of one program: 100 ms batches to the receiver, with its instance id. */
function otel(protocol: 'http/protobuf' | 'http/json', instance: string) {
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_RESOURCE_ATTRIBUTES: `service.instance.id=${instance}`,
  };
}

async function sidecarOn(agent: string, adapterUrl: string): Promise<ChildSidecar> {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: adapterUrl,
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: join(set.dir, `outbox-${agent}.db`),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '400',
    AGW_JOURNAL_SOCKET: join(set.dir, 'no-journal.sock'),
    ...otel('http/json', `sidecar-${agent}`),
  });
  sidecars.push(s);
  return s;
}

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  set = await startReplicaSet([], 2, {
    env: (i) => otel('http/protobuf', `replica-${i}`),
  });
  pm = await sidecarOn('pm', set.replicas.urlOf(0));
  qa = await sidecarOn('qa', set.replicas.urlOf(1));
  for (const s of [pm, qa])
    await until(async () => (await call(s.url, 'GET', '/readyz')).status === 200, 'start gate');
}, 60_000);

afterAll(async () => {
  for (const s of sidecars) if (s.child.exitCode === null) s.child.kill('SIGKILL');
  await Promise.all(sidecars.map((s) => s.exited));
  await set?.cleanup(); // kills every replica by its pid, drops the database
  await receiver?.close();
}, 30_000);

const find = (s: ReceivedSpan[], trace: string, service: string, name: string) =>
  s.filter((x) => x.traceId === trace && x.service === service && x.name === name);
const instanceOf = (s: ReceivedSpan | undefined) => s?.resource['service.instance.id'];
const has = (s: ReceivedSpan[], trace: string, service: string, name: string, instance: string) =>
  find(s, trace, service, name).some((x) => instanceOf(x) === instance);

it("stores pm's context through replica 0 and hands it over through replica 1, each replica's spans in their traces", {
  timeout: 60_000,
}, async () => {
  // pm's turn, through its sidecar on replica 0
  const turn = `00-${hex(16)}-${hex(8)}-01`;
  const T = ids(turn);
  const sent = await call(pm.url, 'POST', '/v1/messages', {
    headers: { traceparent: turn, tracestate: 'orchestrator=replicas' },
    body: { to: 'product', kind: 'task/request', payload: { task_id: 'T-1', description: 'd' } },
  });
  expect(sent.status).toBe(201);
  const messageId = sent.body.message_id as string;
  const storedTp = sent.body.traceparent as string;
  const stored = ids(storedTp);
  expect(stored.traceId).toBe(T.traceId);
  expect(stored.spanId).not.toBe(T.spanId);

  // qa's turn, through its sidecar on replica 1, in a trace of its own
  const fetchTp = `00-${hex(16)}-${hex(8)}-01`;
  const F = ids(fetchTp);
  let delivery: Json | undefined;
  await until(async () => {
    const r = await call(qa.url, 'GET', '/v1/inbox?wait=2&max=10', {
      headers: { traceparent: fetchTp },
    });
    delivery = (r.body.deliveries as Json[] | undefined)?.find(
      (d) => d.message.message_id === messageId,
    );
    return delivery !== undefined;
  }, `qa receives ${messageId} through replica 1`);
  expect(delivery.message).toMatchObject({
    message_id: messageId,
    sender: 'pm',
    traceparent: storedTp,
    tracestate: 'orchestrator=replicas',
  });
  const ack = await call(qa.url, 'POST', '/v1/acks', {
    headers: { traceparent: fetchTp },
    body: { delivery_ids: [delivery.delivery_id] },
  });
  expect(ack.status).toBe(200);

  // the stored message, read at the other replica, has the context it was stored with
  const read = await call(set.replicas.urlOf(1), 'GET', `/v1/messages/${messageId}`, {
    agent: 'pm',
  });
  expect(read.status).toBe(200);
  expect(read.body.message).toMatchObject({
    message_id: messageId,
    traceparent: storedTp,
    tracestate: 'orchestrator=replicas',
  });

  // each process exports on its own schedule: wait for every span asserted on
  const spans = await receiver.waitFor(
    (s) =>
      has(s, T.traceId, SIDECAR, 'send product', 'sidecar-pm') &&
      has(s, T.traceId, ADAPTER, 'send product', 'replica-0') &&
      has(s, T.traceId, ADAPTER, 'commit', 'replica-0') &&
      has(s, F.traceId, SIDECAR, 'receive product', 'sidecar-qa') &&
      has(s, F.traceId, ADAPTER, 'receive product', 'replica-1') &&
      has(s, F.traceId, SIDECAR, 'settle product', 'sidecar-qa') &&
      s.some(
        (x) =>
          x.traceId === F.traceId &&
          x.service === ADAPTER &&
          x.name.startsWith('settle ') &&
          instanceOf(x) === 'replica-1',
      ),
  );

  // pm's sidecar's send: a child of pm's span, the stored context
  const [pmSend] = find(spans, T.traceId, SIDECAR, 'send product');
  expect(pmSend).toMatchObject({ kind: PRODUCER, parentSpanId: T.spanId, spanId: stored.spanId });
  // replica 0 stored it: its send a child of the message's context, its commit a child of that
  const sends = find(spans, T.traceId, ADAPTER, 'send product');
  expect(sends.map(instanceOf)).toEqual(['replica-0']);
  const [aSend] = sends;
  expect(aSend).toMatchObject({ kind: PRODUCER, parentSpanId: stored.spanId });
  expect(aSend!.resource['service.name']).toBe(ADAPTER); // the default name, with the instance
  expect(aSend!.attributes).toMatchObject({
    'messaging.message.id': messageId,
    'messaging.destination.name': 'product',
  });
  const commits = find(spans, T.traceId, ADAPTER, 'commit');
  expect(commits.map(instanceOf)).toEqual(['replica-0']);
  expect(commits[0]!.parentSpanId).toBe(aSend!.spanId);
  // replica 1 exported nothing of pm's trace: it neither took nor stored the send
  expect(spans.filter((x) => x.traceId === T.traceId && instanceOf(x) === 'replica-1')).toEqual([]);

  // replica 1 handed it over: its receive in qa's trace, a child of qa's sidecar's, linked to
  // the message's context
  const linkedToMessage = (s: ReceivedSpan) =>
    s.links.some((l) => l.traceId === T.traceId && l.spanId === stored.spanId);
  const qaReceive = find(spans, F.traceId, SIDECAR, 'receive product').find(linkedToMessage);
  expect(qaReceive).toMatchObject({ kind: CONSUMER, parentSpanId: F.spanId });
  const aReceives = find(spans, F.traceId, ADAPTER, 'receive product').filter(linkedToMessage);
  expect(aReceives.map(instanceOf)).toEqual(['replica-1']);
  const [aReceive] = aReceives;
  expect(aReceive).toMatchObject({ kind: CONSUMER, parentSpanId: qaReceive!.spanId });
  expect(aReceive!.attributes).toMatchObject({
    'messaging.message.id': messageId,
    'agw.recipient': 'qa',
    'agw.attempt': 1,
  });
  const link = aReceive!.links.find((l) => l.spanId === stored.spanId)!;
  expect(link.attributes).toMatchObject({ 'messaging.message.id': messageId, 'agw.attempt': 1 });
  // and the ack, through replica 1: its settle a child of qa's sidecar's
  const qaSettle = find(spans, F.traceId, SIDECAR, 'settle product').find(linkedToMessage);
  expect(qaSettle).toMatchObject({ parentSpanId: F.spanId });
  const aSettle = spans.find((x) => x.service === ADAPTER && x.parentSpanId === qaSettle!.spanId);
  expect(aSettle?.name).toMatch(/^settle /);
  expect(instanceOf(aSettle)).toBe('replica-1');
});
