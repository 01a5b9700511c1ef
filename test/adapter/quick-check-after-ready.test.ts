/**
 * PRAGMA quick_check runs in the background: the adapter turns ready once the store is open and
 * swept, and a broken page the check finds later turns /health to 503 for good.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, sendAs } from '../helpers/http.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-qc-bg-');
afterAll(cleanup);

it('passes: integrity resolves with its duration and /health stays 200', async () => {
  const t = await startTestAdapter({ db: join(dir, 'fine.db') });
  try {
    expect(await t.adapter.integrity).toEqual(expect.any(Number));
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  } finally {
    await t.stop();
  }
});

it('a broken page the first sweep never reads: ready, then quick_check fails and /health is 503', {
  timeout: 30_000,
}, async () => {
  const db = join(dir, 'broken.db');
  const first = await startTestAdapter({ db });
  for (let i = 0; i < 100; i++) {
    await sendAs(first.url, 'pm', 'product', 'status', { text: 'x'.repeat(2000) });
  }
  await first.stop(); // a clean stop folds the WAL into the file

  // The messages table's leaf pages hold bodies; start and its sweep read deliveries, not them.
  const file = new Database(db, { readonly: true });
  const pageSize = file.pragma('page_size', { simple: true }) as number;
  const leaves = file
    .prepare("SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf'")
    .pluck()
    .all() as number[];
  file.close();
  expect(leaves.length).toBeGreaterThan(4);
  const page = leaves[Math.floor(leaves.length / 2)]!;
  const fd = openSync(db, 'r+');
  writeSync(fd, Buffer.alloc(pageSize, 0x5a), 0, pageSize, (page - 1) * pageSize);
  closeSync(fd);

  const t = await startTestAdapter({ db }); // resolves once ready: the check did not hold it
  try {
    await expect(t.adapter.integrity).rejects.toThrow(/PRAGMA quick_check found \d+ problem/);
    const health = await call(t.url, 'GET', '/health');
    expect(health.status).toBe(503);
    expect(health.body.error).toBe('not_ready');
    expect(health.body.message).toMatch(/^integrity: PRAGMA quick_check found/);
  } finally {
    await t.stop();
  }
});
