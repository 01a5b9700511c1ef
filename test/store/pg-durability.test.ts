/**
 * Persist before ack on PostgreSQL: at AGW_SYNC=full every commit that holds a message waits for
 * its WAL flush, so N sends committed one at a time cost at least N WAL syncs of the server
 * (pg_stat_wal.wal_sync, cluster-wide: other work only adds to it; read once the store's
 * connections have ended and handed their counts over). With synchronous_commit off for them
 * the WAL writer syncs on its own schedule, a few times a second: run at AGW_SYNC=normal, the
 * same loop counted far fewer than N/2 (checked by hand, 2026-12-01; not kept as a test, since
 * other tests' commits on the same server would add to that count).
 */
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { testDatabase } from '../helpers/pg.js';

const N = 200;
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

/** WAL syncs of the server while N sends commit one at a time at `sync`. */
async function walSyncsFor(sync: 'full' | 'normal'): Promise<number> {
  const db = await testDatabase();
  cleanups.push(() => db.drop());
  const store = await openPgStore(db.url, {
    sync,
    delivery: { alertsTo: 'orchestrator', capacity: 10_000 },
  });
  await store.ensureChannels(['@qa', '@orchestrator']);
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  cleanups.push(() => admin.end());
  const syncs = async () =>
    Number((await admin.query('SELECT wal_sync FROM pg_stat_wal')).rows[0].wal_sync);
  const before = await syncs();
  for (let i = 0; i < N; i++) {
    const { results } = await store.commit([{ op: 'append', drafts: [draft()] }]);
    expect(results[0]).toHaveProperty('ok');
  }
  // a backend hands its counts to pg_stat_wal when it goes idle for a while or exits: the
  // store's connections end here, so what they did is counted
  await store.close();
  // (until the count stops moving, or 20 looks: other work on the server only adds to it)
  let last = -1;
  for (let i = 0, now = await syncs(); now !== last && i < 20; i++, now = await syncs()) {
    last = now;
    await new Promise((r) => setTimeout(r, 300));
  }
  return last - before;
}

it('waits for a WAL flush at every commit that holds a message (AGW_SYNC=full)', {
  timeout: 60_000,
}, async () => {
  expect(await walSyncsFor('full')).toBeGreaterThanOrEqual(N);
});
