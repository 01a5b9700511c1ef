/**
 * Migration 3 (storage bounds) on a file written before it: each stored message gets the size
 * it counts against its sender, and the senders' totals come out exactly as an adapter that had
 * counted them from the start would have them. The "before" file is this store's own, with
 * what migrations 3 and 4 added taken out again, so the two counts meet on the same messages.
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-migrate-');
afterEach(cleanup);

function draft(sender: string, channel: string, to: string[], text: string): MessageDraft {
  const key = randomUUID();
  return {
    sender,
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel,
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: JSON.stringify({ text }),
    receivedAt: Date.now(),
    recipients: to,
  };
}

it('counts the messages already stored against their senders, as they would have been counted', async () => {
  const file = join(dir, 'a.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await store.ensureChannels(['@qa', 'product']);
  await store.commit([
    {
      op: 'append',
      drafts: [
        draft('pm', '@qa', ['qa'], 'ünïcødé '.repeat(500)),
        draft('pm', 'product', ['qa', 'growth', 'research'], 'x'.repeat(20_000)),
        draft('engineering', 'product', ['pm', 'qa'], 'short'),
      ],
    },
  ]);
  const counted = (await store.storageUse()).senders;
  expect(Object.keys(counted).sort()).toEqual(['engineering', 'pm']);
  await store.close();

  const db = new Database(file);
  db.exec(`
    DROP INDEX messages_by_thread;
    DROP TABLE threads;
    ALTER TABLE messages DROP COLUMN thread_id;
    ALTER TABLE messages DROP COLUMN hop;
    ALTER TABLE alert_state DROP COLUMN sender;
    DROP TABLE sender_usage;
    ALTER TABLE messages DROP COLUMN size;
  `); // migrations 4 and 3 undone
  db.pragma('user_version = 2');
  db.close();

  const reopened = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  try {
    expect((await reopened.storageUse()).senders).toEqual(counted);
  } finally {
    await reopened.close();
  }
});
