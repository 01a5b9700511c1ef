/**
 * The SQLite store against the storage conformance suite: a real file in a fresh temporary
 * folder per test, opened as the adapter opens it (synchronous=FULL).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { openStore } from '../../src/store/open.js';
import type { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { storeConformance } from './conformance/index.js';

storeConformance('SQLite store', async ({ delivery, storage, budgets }) => {
  const dir = mkdtempSync(join(tmpdir(), 'agw-store-'));
  const file = join(dir, 'adapter.db');
  const opts = { sync: 'full', delivery, storage, budgets } as const;
  const store = (await openStore(file, opts)) as SqliteStore;
  let current: SqliteStore = store;
  return {
    store,
    reopen: async () => {
      await current.close();
      current = (await openStore(file, opts)) as SqliteStore;
      return current;
    },
    // SQLite's own page cap (PRAGMA max_page_count) at the pages the file has: writes that need
    // another page fail with SQLITE_FULL, as on a full disk
    fillDisk: (full) => current.limitPages(full ? 1 : undefined),
    cleanup: async () => {
      await current.close();
      rmSync(dir, { recursive: true, force: true });
    },
    // A second connection rewrites one byte of the stored body and leaves the checksum alone.
    corrupt: (channel, seq) => {
      const db = new Database(file);
      try {
        db.pragma('busy_timeout = 5000');
        const row = db
          .prepare<[string, number], { body: string }>(
            'SELECT body FROM messages WHERE channel = ? AND seq = ?',
          )
          .get(channel, seq);
        if (row === undefined) throw new Error(`no message ${channel} #${seq} to corrupt`);
        const at = row.body.indexOf('"kind"') + 1; // "kind" becomes "jind"
        const body = `${row.body.slice(0, at)}j${row.body.slice(at + 1)}`;
        const { changes } = db
          .prepare('UPDATE messages SET body = ? WHERE channel = ? AND seq = ?')
          .run(body, channel, seq);
        if (changes !== 1) throw new Error(`corrupted ${changes} rows, not 1`);
      } finally {
        db.close();
      }
    },
  };
});
