/**
 * Alert aggregation and retention against a real store, with the clock passed in: a burst of
 * dead letters makes one alert per recipient and reason per 30 s with the right counts, and
 * retention prunes old normal messages but keeps contracts and undelivered ones.
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { tempDir } from '../helpers/topology.js';

let store: SqliteStore;
let cleanup: () => void;
beforeEach(async () => {
  const t = tempDir('agw-alerts-');
  cleanup = t.cleanup;
  store = new SqliteStore(join(t.dir, 's.db'), {
    delivery: {
      capacity: 1,
      leaseMs: 1000,
      maxRetries: 3,
      retryBaseMs: 1000,
      alertsTo: 'orchestrator',
    },
  });
  await store.ensureChannels(['@qa', '@pm', '@orchestrator']);
});
afterEach(async () => {
  await store.close();
  cleanup();
});

function draft(to: string, at: number, priority: 'normal' | 'critical' = 'normal'): MessageDraft {
  const key = randomUUID();
  return {
    sender: 'engineering',
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: to,
    kind: 'status',
    priority,
    replyTo: null,
    payloadJson: '{}',
    receivedAt: at,
    recipients: [to.slice(1)],
  };
}

const alerts = async () =>
  (await store.channelMessages('@orchestrator', 0, 1000))
    .map((b) => JSON.parse(b) as Json)
    .map((m) => ({
      reason: m.payload.reason,
      recipient: m.payload.recipient,
      count: m.payload.count,
      ids: m.payload.message_ids.length,
    }));

describe('alert aggregation', () => {
  it('a burst of 1,000 dead letters yields one alert per recipient and reason per 30 s, with the counts', async () => {
    const t0 = 1_000_000_000_000;
    await store.commit([
      { op: 'append', drafts: [draft('@qa', t0, 'critical'), draft('@pm', t0, 'critical')] },
    ]);
    // both queues (capacity 1) hold a critical: every normal delivery is dead-lettered at once
    await store.commit([
      ...Array.from({ length: 600 }, (_, i) => ({
        op: 'append' as const,
        drafts: [draft('@qa', t0 + i)],
      })),
      ...Array.from({ length: 400 }, (_, i) => ({
        op: 'append' as const,
        drafts: [draft('@pm', t0 + i)],
      })),
    ]);
    expect(await alerts()).toEqual([
      { reason: 'queue_full', recipient: 'qa', count: 1, ids: 1 },
      { reason: 'queue_full', recipient: 'pm', count: 1, ids: 1 },
    ]);
    await store.commit([{ op: 'sweep', now: t0 + 29_000 }]); // inside the window: nothing
    expect(await alerts()).toHaveLength(2);
    expect(await store.nextDue(t0 + 29_000)).toBe(t0 + 30_000);
    await store.commit([{ op: 'sweep', now: t0 + 30_000 }]);
    const byRecipient = (await alerts())
      .slice(2)
      .sort((a, b) => a.recipient.localeCompare(b.recipient));
    expect(byRecipient).toEqual([
      { reason: 'queue_full', recipient: 'pm', count: 399, ids: 20 },
      { reason: 'queue_full', recipient: 'qa', count: 599, ids: 20 },
    ]);
    await store.commit([{ op: 'sweep', now: t0 + 90_000 }]); // nothing more to say
    expect(await alerts()).toHaveLength(4);
    expect(store.stats.deadLetters.queue_full).toBe(1000);
  });
});

describe('retention', () => {
  it('prunes old normal messages; contracts and undelivered ones stay', async () => {
    let now = Date.now();
    const t = await startTestAdapter({ retentionDays: '30' }, { now: () => now });
    try {
      const send = (kind: string, payload: object, to = '@qa') =>
        call(t.url, 'POST', '/v1/messages', {
          agent: 'pm',
          body: { idempotency_key: randomUUID(), to, kind, payload },
        });
      const old = await send('status', { n: 'old-acked' });
      const contract = await send('task/request', { task_id: 'T-1', description: 'keep me' });
      const undelivered = await send('status', { n: 'old-unacked' }, '@growth');
      const got = (await call(t.url, 'GET', '/v1/inbox?max=10', { agent: 'qa' })).body
        .deliveries as Json[];
      await call(t.url, 'POST', '/v1/acks', {
        agent: 'qa',
        body: { delivery_ids: got.map((d) => d.delivery_id) },
      });
      now += 31 * 24 * 3600 * 1000; // a month later
      const fresh = await send('status', { n: 'new' });
      expect(await t.adapter.retention.run()).toBe(1);
      const qa = (
        await call(t.url, 'GET', `/v1/channels/${encodeURIComponent('@qa')}/messages`, {
          agent: 'qa',
        })
      ).body.messages as Json[];
      expect(qa.map((m) => m.message_id)).toEqual([
        contract.body.message_id,
        fresh.body.message_id,
      ]);
      const growth = (
        await call(t.url, 'GET', '/v1/channels/@growth/messages', { agent: 'growth' })
      ).body.messages as Json[];
      expect(growth.map((m) => m.message_id)).toEqual([undelivered.body.message_id]);
      // the key went with its message: the same key is new again, but the sequence never repeats
      const again = await call(t.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: {
          idempotency_key: old.body.idempotency_key,
          to: '@qa',
          kind: 'status',
          payload: { n: 'old-acked' },
        },
      });
      expect(again.status).toBe(201);
      expect(again.body.channel_sequence_id).toBe(4); // @qa had 1..3; 1 is gone but not reused
    } finally {
      await t.stop();
    }
  });
});
