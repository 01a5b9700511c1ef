/**
 * A message's journey on PostgreSQL across adapter replicas, over HTTP: every event is written
 * through one replica and the journey read through another. Each cause is set up for real: a
 * recipient that never polled, a lease held and one left to expire, a copy waiting behind a
 * lane's head, a nack with retry false, a full queue that evicts, an ack; and an adapter
 * SIGKILLed while the sender's sidecar queues, then started again so the sidecar drains.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ChildSidecar, spawnSidecar } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { type ReplicaSet, startReplicaSet } from '../helpers/replicas.js';
import { tokenOf } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

let held: ReplicaSet; // default leases: the queue holds 2 a recipient
let short: ReplicaSet; // 200 ms leases, retries an hour apart
let journal: TestJournal;
const sidecars: ChildSidecar[] = [];

beforeAll(async () => {
  [held, short, journal] = await Promise.all([
    startReplicaSet(['--queue-capacity', '2'], 2),
    startReplicaSet(['--lease-ms', '200', '--retry-base-ms', '3600000'], 2),
    startJournal(),
  ]);
}, 60_000);
afterAll(async () => {
  for (const s of sidecars) s.child.kill('SIGKILL');
  await Promise.all(sidecars.map((s) => s.exited));
  await Promise.all([held?.cleanup(), short?.cleanup(), journal?.destroy()]);
}, 30_000);

const TASK = { task_id: 'T-1', description: 'one' };
const send = async (url: string, to: string, kind = 'status', agent = 'pm') => {
  const payload = kind === 'task/request' ? TASK : {};
  const r = await call(url, 'POST', '/v1/messages', {
    agent,
    body: { to, kind, payload, idempotency_key: randomUUID() },
  });
  if (r.status !== 201) throw new Error(`send: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.message_id as string;
};
const copyOf = async (url: string, id: string, recipient: string, agent = 'pm') => {
  const r = await call(url, 'GET', `/v1/messages/${id}/journey`, { agent });
  if (r.status !== 200) throw new Error(`journey: ${r.status} ${JSON.stringify(r.body)}`);
  return (r.body.recipients as Json[]).find((c) => c.agent === recipient);
};
const eventsOf = (copy: Json) => copy.events.map((e: Json) => e.event);
const inbox = async (url: string, agent: string, max = 10) =>
  (await call(url, 'GET', `/v1/inbox?max=${max}`, { agent })).body.deliveries as Json[];

it('tells a poll, a lease, a lane held and an ack written through one replica, read through the other', async () => {
  const [a, b] = [held.replicas.urlOf(0), held.replicas.urlOf(1)];
  const first = await send(a, '@qa', 'task/request');
  expect(await copyOf(b, first, 'qa')).toMatchObject({
    cause: 'waiting_for_poll',
    last_poll: null,
    explanation: 'Ready: qa has never polled; 1 message waits for it.',
  });
  const second = await send(b, '@qa');
  const [d] = await inbox(b, 'qa', 1); // through b: a's journey must still see it
  expect(d.message.message_id).toBe(first);
  const head = await copyOf(a, first, 'qa', 'qa');
  expect(head).toMatchObject({ cause: 'leased', state: 'leased', attempts: 1 });
  expect(Date.parse(head.last_poll)).toBeGreaterThan(0);
  const leased = head.events.find((e: Json) => e.event === 'leased');
  expect(leased).toMatchObject({
    attempt: 1,
    detail: { replica: expect.any(String), lease_expires_at: expect.any(String) },
  });
  const behind = await copyOf(a, second, 'qa');
  expect(behind).toMatchObject({
    cause: 'waiting_behind',
    waiting_behind: { message_id: first, channel_sequence_id: 1, cause: 'leased' },
  });
  expect(behind.explanation).toMatch(
    /^Behind #1 \(task\/request from pm\), leased to qa since \d\d:\d\d:\d\d .*attempt 1 of 4\.$/,
  );
  await call(a, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [d.delivery_id] } });
  const acked = await copyOf(b, first, 'qa');
  expect(acked.cause).toBe('acked');
  expect(eventsOf(acked)).toEqual(['queued', 'leased', 'acked']);
});

it('tells a rejection and an eviction written through one replica, read through the other', async () => {
  const [a, b] = [held.replicas.urlOf(0), held.replicas.urlOf(1)];
  const rejectedId = await send(a, '@engineering');
  const [d] = await inbox(a, 'engineering');
  await call(a, 'POST', '/v1/nacks', {
    agent: 'engineering',
    body: { delivery_ids: [d!.delivery_id], retry: false, reason: 'not for engineering' },
  });
  const rejected = await copyOf(b, rejectedId, 'engineering', 'engineering');
  expect(rejected).toMatchObject({ cause: 'dead_letter', reason: 'rejected' });
  expect(rejected.events.at(-1)).toMatchObject({
    event: 'dead_lettered',
    detail: { reason: 'rejected', note: 'not for engineering' },
  });
  // the queue holds 2: a third copy for research evicts the oldest, through the other replica
  const oldest = await send(a, '@research');
  await send(a, '@research');
  await send(b, '@research');
  const evicted = await copyOf(a, oldest, 'research');
  expect(evicted).toMatchObject({ cause: 'dead_letter', reason: 'evicted' });
  expect(evicted.explanation).toContain("research's full queue dropped it");
  expect(eventsOf(evicted)).toEqual(['queued', 'evicted']);
});

it("tells a lease one replica gave and another replica's sweep expired as a retry", async () => {
  const [a, b] = [short.replicas.urlOf(0), short.replicas.urlOf(1)];
  const id = await send(a, '@growth');
  expect(await inbox(a, 'growth')).toHaveLength(1); // leased, never acked
  await until(
    async () => eventsOf(await copyOf(b, id, 'growth')).includes('lease_expired'),
    "a sweep to expire growth's lease",
  );
  const copy = await copyOf(b, id, 'growth');
  expect(copy).toMatchObject({ cause: 'retry_backoff', state: 'pending', attempts: 1 });
  expect(copy.explanation).toMatch(/^The lease of attempt 1 expired; attempt 2 of 4 is due at/);
  expect(eventsOf(copy)).toEqual(['queued', 'leased', 'lease_expired']);
});

it('tells a send queued at its sidecar while its adapter is SIGKILLed, then its journey once drained', async () => {
  const { replicas } = held;
  const sidecar = await spawnSidecar({
    AGW_ADAPTER_URL: replicas.urlOf(0),
    AGW_AGENT_ID: 'pm',
    AGW_AGENT_TOKEN: tokenOf('pm'),
    AGW_OUTBOX: join(held.dir, `outbox-pm-${randomUUID()}.db`),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '400',
    AGW_JOURNAL_SOCKET: journal.socket,
  });
  sidecars.push(sidecar);
  await replicas.kill(0);
  const key = randomUUID();
  const sent = await call(sidecar.url, 'POST', '/v1/messages', {
    body: { to: '@growth', kind: 'status', payload: {}, idempotency_key: key },
  });
  expect([sent.status, sent.body.status], JSON.stringify(sent.body)).toEqual([202, 'queued']);
  const atSender = await call(sidecar.url, 'GET', `/v1/messages/${key}/journey`);
  expect(atSender.status).toBe(200);
  expect(atSender.body).toMatchObject({
    idempotency_key: key,
    cause: 'queued_at_sender',
    recipients: [],
  });
  expect(atSender.body.outbox.since).toBe(
    new Date(Date.parse(atSender.body.outbox.since)).toISOString(),
  );
  expect(atSender.body.explanation).toMatch(/^Still in pm's sidecar since \d\d:\d\d:\d\d/);
  // the drain keeps failing while the replica is down: the tries and the error are told
  await until(async () => {
    const j = (await call(sidecar.url, 'GET', `/v1/messages/${key}/journey`)).body;
    return j.outbox?.tries >= 1 && j.outbox.last_error !== null;
  }, 'a failed try of the drain');
  // the replica comes back on its port; the sidecar drains; its answer is now the adapter's
  await replicas.start(0, { samePort: true });
  let drained: Json;
  await until(async () => {
    drained = (await call(sidecar.url, 'GET', `/v1/messages/${key}/journey`)).body;
    return drained.message?.message_id !== undefined;
  }, 'the drain');
  expect(drained.recipients).toMatchObject([
    { agent: 'growth', cause: 'waiting_for_poll', state: 'pending' },
  ]);
  // the other replica finds it by the same key, for its sender only
  const direct = await call(replicas.urlOf(1), 'GET', `/v1/messages/${key}/journey`, {
    agent: 'pm',
  });
  expect(direct.body.message.message_id).toBe(drained.message.message_id);
  sidecar.child.kill('SIGTERM');
  await sidecar.exited;
}, 60_000);
