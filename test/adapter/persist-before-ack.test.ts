/**
 * Persist before ack, observed from outside: the moment a 201 reaches the sender, another
 * connection to the database file must already see the message. An adapter that answered
 * before its COMMIT returned would be caught here, with fsync wide open as the window.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { afterAll, expect, it } from 'vitest';
import { spawnAdapter } from '../helpers/cli.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-pba-');
afterAll(cleanup);

it('every acknowledged message is already committed when its 201 arrives', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'adapter.db');
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', db]);
  const reader = new Database(db, { readonly: true });
  const find = reader
    .prepare('SELECT seq FROM messages WHERE sender = ? AND idempotency_key = ?')
    .pluck();
  const pool = new Pool(adapter.url, { connections: 32 });
  let checked = 0;
  try {
    await Promise.all(
      Array.from({ length: 32 }, async (_, w) => {
        for (let i = 0; i < 60; i++) {
          const key = randomUUID();
          const res = await pool.request({
            method: 'POST',
            path: '/v1/messages',
            headers: {
              authorization: `Bearer ${tokenOf('pm')}`,
              'content-type': 'application/json',
            },
            body: JSON.stringify({
              idempotency_key: key,
              to: 'product',
              kind: 'status',
              payload: { w, i },
            }),
          });
          const ack = (await res.body.json()) as { channel_sequence_id: number };
          expect(res.statusCode).toBe(201);
          // synchronous read on another connection, before anything else can run
          expect(find.get('pm', key)).toBe(ack.channel_sequence_id);
          checked++;
        }
      }),
    );
    expect(checked).toBe(32 * 60);
  } finally {
    await pool.destroy();
    reader.close();
    adapter.child.kill('SIGTERM');
    await adapter.exited;
  }
});
