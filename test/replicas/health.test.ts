/**
 * /health on PostgreSQL asks the database each time: 200 while it answers at the schema version
 * this adapter knows; 503 naming the version when the schema is another (a newer replica
 * migrated it during a rolling update); 503 naming the database when it does not answer.
 * Meanwhile its reads and writes answer 503 `storage_error` with Retry-After, not 500.
 * An in-process adapter on a real database of its own.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('turns 503 while the schema is at another version, and back to 200', async () => {
  const db = await testDatabase();
  stops.push(() => db.drop());
  const a = await startTestAdapter({ db: db.url });
  stops.push(() => a.stop());
  expect((await call(a.url, 'GET', '/health')).status).toBe(200);
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  stops.push(() => admin.end());
  const { rows } = await admin.query<{ v: number }>('SELECT max(version) AS v FROM agw_schema');
  await admin.query('INSERT INTO agw_schema (version) VALUES ($1)', [rows[0]!.v + 1]);
  const r = await call(a.url, 'GET', '/health');
  expect(r.status).toBe(503);
  expect(r.body.message).toMatch(/schema is at version \d+; this program knows \d+/);
  await admin.query('DELETE FROM agw_schema WHERE version > $1', [rows[0]!.v]);
  expect((await call(a.url, 'GET', '/health')).status).toBe(200);
});

it('turns 503 when the database does not answer', async () => {
  const db = await testDatabase();
  const a = await startTestAdapter({ db: db.url });
  stops.push(() => a.stop());
  expect((await call(a.url, 'GET', '/health')).status).toBe(200);
  await db.drop(); // its connections are ended and it is gone
  const r = await call(a.url, 'GET', '/health');
  expect(r.status).toBe(503);
  expect(r.body.message).toMatch(/^store: PostgreSQL does not answer/);
  // and its reads and writes are retryable 503s with Retry-After, never a 500
  const reads = await call(a.url, 'GET', '/v1/channels/@qa/messages?after=0', { agent: 'qa' });
  const writes = await call(a.url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {} },
  });
  for (const answer of [reads, writes]) {
    expect(answer.status).toBe(503);
    expect(answer.body.error).toBe('storage_error');
    expect(Number(answer.headers.get('retry-after'))).toBeGreaterThan(0);
  }
});
