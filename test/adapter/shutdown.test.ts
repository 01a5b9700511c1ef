/**
 * SIGTERM under load: intake stops, commits in flight finish and are answered, the database is
 * closed cleanly (its WAL checkpointed away), and the process exits 0.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { afterAll, expect, it } from 'vitest';
import { spawnAdapter } from '../helpers/cli.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-term-');
afterAll(cleanup);

it('SIGTERM finishes what was taken, refuses the rest, and closes the store', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'adapter.db');
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', db]);
  const pool = new Pool(adapter.url, { connections: 32 });
  const acked = new Set<string>();
  const statuses = new Map<number, number>();
  let stop = false;
  // under load: every one of the 32 connections has had a message acked, and they keep sending
  const loaded = new Set<number>();
  let underLoad = () => {};
  const running = new Promise<void>((resolve) => {
    underLoad = resolve;
  });
  const worker = async (_: unknown, n: number) => {
    while (!stop) {
      const key = randomUUID();
      try {
        const res = await pool.request({
          method: 'POST',
          path: '/v1/messages',
          headers: { authorization: `Bearer ${tokenOf('qa')}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            idempotency_key: key,
            to: 'product',
            kind: 'status',
            payload: {},
          }),
        });
        const body = (await res.body.json()) as { error?: string };
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
        if (res.statusCode === 201) {
          acked.add(key);
          loaded.add(n);
          if (loaded.size === 32) underLoad();
        } else expect(body.error).toBe('shutting_down');
      } catch {
        // the listener is closed: the request never reached the adapter
      }
    }
  };
  const workers = Array.from({ length: 32 }, worker);
  await Promise.race([
    running,
    adapter.exited.then(() => {
      throw new Error(`the adapter exited under load:\n${adapter.lines.join('\n')}`);
    }),
  ]);
  adapter.child.kill('SIGTERM');
  const exit = await adapter.exited;
  stop = true;
  await Promise.all(workers);
  await pool.destroy();

  expect(exit).toEqual({ code: 0, signal: null });
  expect(acked.size).toBeGreaterThan(0);
  expect([...statuses.keys()].every((s) => s === 201 || s === 503)).toBe(true);
  expect(existsSync(`${db}-wal`)).toBe(false); // closed: the last connection checkpointed the WAL
  const conn = new Database(db, { readonly: true });
  const stored = new Set(
    conn.prepare('SELECT idempotency_key FROM messages').pluck().all() as string[],
  );
  conn.close();
  for (const key of acked) expect(stored.has(key)).toBe(true);
  expect(adapter.lines.join('\n')).toContain('adapter stopping');
});
