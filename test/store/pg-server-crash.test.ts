/**
 * AGW_SYNC=full on PostgreSQL: what a commit answered survives a crash of the database server. A
 * server of the test's own (pg-server.ts) takes messages, leases and acks one at a time, and is
 * SIGKILLed (postmaster and every backend) right after the last answer; restarted on the same
 * directory (crash recovery), every message answered is there and every delivery whose ack was
 * answered is acked, and so never handed over again (the sidecar relies on it;
 * docs/reference/configuration.md, AGW_SYNC). The server's WAL writer is slowed to 10 s
 * (wal_writer_delay), so that a commit made without waiting for its flush
 * (synchronous_commit = off) is still unflushed at the kill, as the last fraction of a second's
 * commits are on a busy server.
 */
import { createHash, randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { openPgStore, type PgStore } from '../../src/store/postgres/pg-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { PgServer } from '../helpers/pg-server.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function draft(): MessageDraft {
  const key = randomUUID();
  return {
    sender: 'pm',
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: '@qa',
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: '{}',
    receivedAt: Date.now(),
    recipients: ['qa'],
  };
}

const N = 30;

async function open(url: string): Promise<PgStore> {
  const store = await openPgStore(url, {
    sync: 'full',
    delivery: { alertsTo: 'orchestrator', capacity: 10_000 },
  });
  cleanups.push(() => store.close());
  return store;
}

it('keeps every answered send and ack through a SIGKILL of the server (AGW_SYNC=full)', {
  timeout: 120_000,
}, async () => {
  const server = await PgServer.create(['wal_writer_delay=10s']);
  cleanups.push(() => server.stop());
  const url = await server.createDatabase('agw');
  const store = await open(url);
  await store.ensureChannels(['@qa', '@orchestrator']);

  const ids: string[] = [];
  const deliveries: number[] = [];
  for (let i = 0; i < N; i++) {
    const { results } = await store.commit([{ op: 'append', drafts: [draft()] }]);
    const [outcome] = (results[0] as { ok: { assignment: { message_id: string } }[] }).ok;
    ids.push(outcome!.assignment.message_id);
  }
  const leased = await store.commit([{ op: 'lease', agent: 'qa', max: N, now: Date.now() }]);
  for (const json of (leased.results[0] as { ok: string[] }).ok)
    deliveries.push((JSON.parse(json) as { delivery_id: number }).delivery_id);
  expect(deliveries).toHaveLength(N);
  // each ack in a commit of its own, answered before the next: the last ones are the newest
  // WAL when the server dies
  for (const id of deliveries) {
    const { results } = await store.commit([{ op: 'ack', agent: 'qa', ids: [id] }]);
    expect(results[0]).toHaveProperty('ok');
  }
  await server.crash();
  await store.close();
  await server.start(); // crash recovery on the same directory

  const after = await open(url);
  const states = await Promise.all(ids.map((id) => after.messageStatus(id)));
  const lost = ids.filter((_, i) => states[i] === undefined);
  expect(lost, 'messages answered before the crash and gone after it').toEqual([]);
  const notAcked = states.flatMap((s, i) =>
    s?.recipients[0]?.state === 'acked' ? [] : [`${ids[i]}: ${s?.recipients[0]?.state}`],
  );
  expect(notAcked, 'acks answered before the crash and undone by it').toEqual([]);
  // and nothing acked is handed over again, even once every lease has run out
  await after.commit([{ op: 'sweep', now: Date.now() + 3_600_000 }]);
  const again = await after.commit([
    { op: 'lease', agent: 'qa', max: 100, now: Date.now() + 3_600_000 },
  ]);
  expect(again.results[0]).toEqual({ ok: [] });
});
