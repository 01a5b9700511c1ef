/**
 * A row lock held by another session (a replica frozen mid-transaction: SIGSTOP, a VM pause, a
 * partition) does not stall an adapter (it did: every write waited as long as the lock was held;
 * docs/design/postgres.md, "Timeouts"): the group that needs the row waits out lock_timeout
 * (twice), then its senders get a retryable 503 `storage_error` with Retry-After; /health says a
 * commit is stuck meanwhile; the adapter's next group, which does not need the row, commits while
 * the lock is still held; another replica is not stalled at all; once the lock goes, the same
 * request commits. Two in-process adapters on a real PostgreSQL database of their own; the lock
 * held from a separate connection, as psql would hold it.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { replayAll } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

const send = (url: string, agent: string, to: string, key = randomUUID()) =>
  call(url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: key, to, kind: 'status', payload: { key } },
  });

it('answers 503 with Retry-After past the lock timeout, turns /health 503, and commits once the lock goes', {
  timeout: 60_000,
}, async () => {
  const db = await testDatabase();
  stops.push(() => db.drop());
  const a = await startTestAdapter({ db: db.url });
  stops.push(() => a.stop());
  const b = await startTestAdapter({ db: db.url });
  stops.push(() => b.stop());
  expect((await send(a.url, 'pm', '@qa')).status).toBe(201); // qa's agents row exists

  const holder = new pg.Client({ connectionString: db.url });
  holder.on('error', () => undefined);
  await holder.connect();
  let held = true;
  const release = async () => {
    if (!held) return;
    held = false;
    await holder.query('ROLLBACK');
  };
  stops.push(async () => {
    await release().catch(() => undefined);
    await holder.end();
  });
  await holder.query('BEGIN');
  await holder.query("SELECT id FROM agents WHERE id = 'qa' FOR UPDATE");

  const key = randomUUID();
  const stuck = send(a.url, 'pm', '@qa', key);
  // while its group waits on the lock, /health says so (the Service stops routing here)
  let health: { status: number; body: { message?: string } } = { status: 0, body: {} };
  await until(
    async () => {
      health = await call(a.url, 'GET', '/health');
      return health.status === 503;
    },
    () => `a's /health to turn 503 while its commit waits (last: ${JSON.stringify(health)})`,
    { ms: 20_000 },
  );
  expect(health.body.message).toMatch(/^store: a commit has been running for [\d.]+ s/);
  // a write of this adapter that does not need the row, queued behind the stuck group
  const unrelated = send(a.url, 'growth', '@research');

  const r = await stuck;
  expect(r.status).toBe(503);
  expect(r.body.error).toBe('storage_error');
  expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
  // the next group commits, the lock still held
  expect((await unrelated).status).toBe(201);
  // another replica is not stalled at all by this lock
  expect((await send(b.url, 'growth', '@research')).status).toBe(201);
  expect((await call(b.url, 'GET', '/health')).status).toBe(200);
  expect(held).toBe(true);

  await release();
  const again = await send(a.url, 'pm', '@qa', key);
  expect(again.status).toBe(201); // nothing of the first try was stored: not a duplicate
  await until(async () => {
    return (await call(a.url, 'GET', '/health')).status === 200;
  }, "a's /health to turn 200 again");
  const qa = await replayAll(a.url, '@qa');
  expect(qa.map((m) => m.channel_sequence_id)).toEqual([1, 2]);
  expect(qa.filter((m) => m.idempotency_key === key)).toHaveLength(1);
});
