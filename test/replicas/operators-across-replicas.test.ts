/**
 * Operators on PostgreSQL across two adapter replicas, over HTTP: a pause made through one
 * replica holds the agent's polls at the other, also a poll already parked there, and the resume
 * wakes it; the pause outlives a SIGKILL of both replicas. A redrive made through one replica
 * hands its copies over in sequence order through the other, and its progress is read at
 * either; search and the audit log answer the same at both.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, type Json } from '../helpers/http.js';
import { type ReplicaSet, startReplicaSet } from '../helpers/replicas.js';
import { until, untilParked } from '../helpers/wait.js';

const OP = 'operator:alice';
let set: ReplicaSet;

beforeAll(async () => {
  set = await startReplicaSet([], 2);
}, 60_000);
afterAll(async () => {
  await set?.cleanup();
}, 30_000);

const send = async (url: string, to: string, text: string, agent = 'pm') => {
  const r = await call(url, 'POST', '/v1/messages', {
    agent,
    body: { to, kind: 'note/text', payload: { text }, idempotency_key: randomUUID() },
  });
  if (r.status !== 201) throw new Error(`send: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.message_id as string;
};
const inbox = async (url: string, agent: string, wait = 0) => {
  const r = await call(url, 'GET', `/v1/inbox?max=50&wait=${wait}`, { agent });
  if (r.status !== 200) throw new Error(`inbox: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.deliveries as Json[];
};

it('holds a paused agent at every replica, wakes its parked poll at the other on resume, and keeps the pause across SIGKILLs', async () => {
  const [a, b] = [set.replicas.urlOf(0), set.replicas.urlOf(1)];
  expect((await call(a, 'POST', '/v1/agents/research/pause', { agent: OP })).body).toMatchObject({
    paused: true,
    changed: true,
  });
  const id = await send(a, '@research', 'held while paused');
  expect(await inbox(b, 'research')).toEqual([]);
  const parked = inbox(b, 'research', 30);
  await untilParked(b, 'research');
  const agents = (await call(b, 'GET', '/v1/agents', { agent: OP })).body.agents as Json[];
  expect(agents.find((x) => x.id === 'research')).toMatchObject({ paused: true, pending: 1 });
  // both replicas die with the pause in force; it is in the store, not in either of them
  await set.replicas.kill(0);
  await parked.catch(() => []); // b is killed next: its parked poll ends with it
  await set.replicas.kill(1);
  await set.replicas.start(0);
  await set.replicas.start(1);
  const [a2, b2] = [set.replicas.urlOf(0), set.replicas.urlOf(1)];
  expect(await inbox(a2, 'research')).toEqual([]);
  const waiting = inbox(b2, 'research', 30);
  await untilParked(b2, 'research');
  await call(a2, 'POST', '/v1/agents/research/resume', { agent: OP });
  expect((await waiting).map((d) => d.message.message_id)).toEqual([id]);
  const journey = await call(b2, 'GET', `/v1/messages/${id}/journey`, { agent: OP });
  expect(journey.body.recipients[0].events.map((e: Json) => e.event)).toEqual([
    'queued',
    'resumed',
    'leased',
  ]);
}, 90_000);

it('redrives through one replica, hands over in sequence order through the other, and tells progress at both', async () => {
  const [a, b] = [set.replicas.urlOf(0), set.replicas.urlOf(1)];
  const tag = `tag${randomUUID().slice(0, 8)}`;
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push(await send(a, '@growth', `${tag} item ${i}`));
  // all five handed over in one poll (one lane, in order), made dead letters last first
  const got = await inbox(b, 'growth');
  expect(got.map((d) => d.message.message_id)).toEqual(ids);
  for (const [n, d] of [...got].reverse().entries()) {
    const r = await call(n % 2 ? b : a, 'POST', '/v1/nacks', {
      agent: 'growth',
      body: { delivery_ids: [d.delivery_id], retry: false, reason: 'later' },
    });
    expect(r.status).toBe(200);
  }
  const dls = (await call(b, 'GET', `/v1/dead-letters?q=${tag}`, { agent: OP })).body
    .dead_letters as Json[];
  expect(dls).toHaveLength(5);
  const made = await call(a, 'POST', '/v1/dead-letters/redrive', {
    agent: OP,
    body: { filter: { q: tag, recipient: 'growth' }, rate: 2 },
  });
  expect(made.status).toBe(202);
  expect(made.body.count).toBe(5);
  const handed: string[] = [];
  await until(async () => {
    for (const d of await inbox(b, 'growth')) {
      handed.push(d.message.message_id);
      await call(a, 'POST', '/v1/acks', {
        agent: 'growth',
        body: { delivery_ids: [d.delivery_id] },
      });
    }
    return handed.length === 5;
  }, 'the five redriven copies handed over');
  expect(handed).toEqual(ids);
  const progress = await call(b, 'GET', `/v1/redrives/${made.body.redrive_id}`, { agent: OP });
  expect(progress.body).toMatchObject({ total: 5, done: 5, skipped: 0, state: 'done' });
  // the audit log is one chain whichever replica wrote each entry
  const entries = (await call(b, 'GET', '/v1/audit', { agent: OP })).body.entries as Json[];
  for (let i = 1; i < entries.length; i++) expect(entries[i].prev_hash).toBe(entries[i - 1].hash);
  expect(entries.map((e) => e.action)).toEqual(
    expect.arrayContaining(['pause', 'resume', 'redrive']),
  );
  const found = (await call(a, 'GET', `/v1/messages?q=${tag}&limit=2`, { agent: OP })).body;
  expect(found.messages.map((m: Json) => m.message_id)).toEqual([ids[4], ids[3]]);
}, 90_000);
